package peers

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAdmitsLimit: with 10 per hour, a fresh key admits exactly 10 requests
// and refuses the 11th, and another key is unaffected. An hour is long
// enough that no peer refills a whole request during the test, whether it
// refills continuously (token bucket, GCRA) or per window.
func TestAdmitsLimit(t *testing.T) {
	for _, p := range Peers {
		t.Run(p.Name, func(t *testing.T) {
			l := p.New(10, time.Hour)
			defer l.Close()
			for i := range 10 {
				if !l.Allow("a") {
					t.Fatalf("request %d of 10 refused", i+1)
				}
			}
			for i := range 3 {
				if l.Allow("a") {
					t.Fatalf("request %d past the limit admitted", 11+i)
				}
			}
			if !l.Allow("b") {
				t.Fatal("a fresh key was refused after another key used up its limit")
			}
		})
	}
}

// TestFastConfigAdmitsAll: the fast-path configuration admits everything
// the benchmarks can throw at it.
func TestFastConfigAdmitsAll(t *testing.T) {
	for _, p := range Peers {
		t.Run(p.Name, func(t *testing.T) {
			l := p.New(fastLimit, fastWindow)
			defer l.Close()
			for i := range 10_000 {
				if !l.Allow("k" + strconv.Itoa(i%7)) {
					t.Fatalf("request %d refused under the fast-path limit", i)
				}
			}
		})
	}
}

// TestConcurrentNeverOverAdmits: 4 goroutines race on one key with limit
// 100 per hour; no peer may admit more than 100, and each must admit some.
// (Some peers may refuse a few under contention, e.g. ringlimit's
// documented false denials, or GCRA's bounded CAS retries.)
func TestConcurrentNeverOverAdmits(t *testing.T) {
	const limit = 100
	for _, p := range Peers {
		t.Run(p.Name, func(t *testing.T) {
			l := p.New(limit, time.Hour)
			defer l.Close()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 200 {
						if l.Allow("hot") {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if n := admitted.Load(); n > limit || n < limit/2 {
				t.Fatalf("admitted %d of 800 racing requests, want ≤ %d and ≥ %d", n, limit, limit/2)
			}
		})
	}
}

// TestRefills: with 5 per 200ms, a key used up now admits again after a
// window (plus slack for sub-window granularity and httprate's weighting
// of the previous window).
func TestRefills(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps")
	}
	for _, p := range Peers {
		if p.Frozen {
			continue // decides at its creation instant: never refills
		}
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			l := p.New(5, 200*time.Millisecond)
			defer l.Close()
			for i := 0; l.Allow("k"); i++ {
				if i > 5 {
					t.Fatal("admitted more than the limit")
				}
			}
			time.Sleep(450 * time.Millisecond)
			if !l.Allow("k") {
				t.Fatal("still refused two windows later")
			}
		})
	}
}

func TestRNG(t *testing.T) {
	var seen [7]int
	r := newRNG(1)
	for range 70_000 {
		seen[r.intn(7)]++
	}
	for i, n := range seen {
		if n < 9_000 || n > 11_000 {
			t.Fatalf("bucket %d got %d of 70000, want about 10000", i, n)
		}
	}
}

// PrefixedKeySet builds the keys from its prefix, distinct, and keeps the
// sets of different prefixes apart; KeySet is the default prefix's.
func TestPrefixedKeySet(t *testing.T) {
	long := PrefixedKeySet("tenant-3f2a9c1e-7b4d-4e8a-9c0f-", 1000)
	short := KeySet(1000)
	seen := map[string]bool{}
	for i, k := range long {
		if want := "tenant-3f2a9c1e-7b4d-4e8a-9c0f-" + strconv.Itoa(i); k != want || seen[k] {
			t.Fatalf("key %d = %q, want %q, distinct", i, k, want)
		}
		seen[k] = true
		if short[i] != DefaultKeyPrefix+strconv.Itoa(i) {
			t.Fatalf("KeySet's key %d = %q", i, short[i])
		}
	}
}
