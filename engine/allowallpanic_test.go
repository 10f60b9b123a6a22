package engine_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A KeyLimit that panics on the second request of an AllowAll (the design
// considers KeyLimit panics): after recovering, were the first request's
// units returned? (Doubtful as a promise: the panic is the caller's.)
func TestAllowAllKeyLimitPanic(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true})
	f := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true, KeyLimit: func(k string) int64 {
		if k == "boom" {
			panic("keylimit")
		}
		return 0
	}})
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: 3}, engine.Request{Engine: f, Key: "boom", N: 1})
	}()
	if recovered != "keylimit" {
		t.Fatalf("the KeyLimit's panic did not go on: %v", recovered)
	}
	if rem := e.AllowAt("k", 0, t0).Remaining; rem != 3 {
		t.Errorf("after a panic inside AllowAll, the earlier request's %d units stay consumed (all-or-nothing not kept)", 3-rem)
	}
}

type keyLimitPanic struct{ k int }

// A KeyLimit that panics at request k, for every k from 0 to 20 (stack and
// heap reservations), with duplicate keys, new keys and two engines of
// different algorithms: the panic value must come through unchanged and
// every earlier reservation must be given back.
func TestAllowAllPanicAtK(t *testing.T) {
	for _, alg := range allAlgorithms {
		for k := 0; k <= 20; k++ {
			t.Run(fmt.Sprintf("%v/k=%d", alg, k), func(t *testing.T) {
				var arm atomic.Bool
				kl := func(key string) int64 {
					if arm.Load() && key == "boom" {
						panic(&keyLimitPanic{k})
					}
					return 0
				}
				e1 := newEngineNoCloseCheck(t, engine.Config{Limit: 50, Window: time.Second, SubWindows: 5, Algorithm: alg, KeyLimit: kl, DisableEviction: true, Audit: 1})
				e2 := newEngineNoCloseCheck(t, engine.Config{Limit: 40, Window: 3 * time.Second, SubWindows: 3, Algorithm: engine.SlidingWindowStrict, KeyLimit: kl, DisableEviction: true})
				// Pre-create a few keys with some usage.
				e1.AllowAt("x", 3, t0)
				e2.AllowAt("x", 2, t0)
				var reqs []engine.Request
				for i := 0; i < k; i++ {
					e := e1
					if i%3 == 1 {
						e = e2
					}
					key := []string{"x", "y", "x", fmt.Sprintf("n%d", i)}[i%4]
					reqs = append(reqs, engine.Request{Engine: e, Key: key, N: int64(1 + i%2)})
				}
				reqs = append(reqs, engine.Request{Engine: e1, Key: "boom", N: 1})
				reqs = append(reqs, engine.Request{Engine: e1, Key: "x", N: 1})
				arm.Store(true)
				var got any
				func() {
					defer func() { got = recover() }()
					engine.AllowAll(t0, reqs...)
				}()
				arm.Store(false)
				if b, ok := got.(*keyLimitPanic); !ok || b.k != k {
					t.Fatalf("panic value %#v, want *keyLimitPanic{%d}", got, k)
				}
				// Everything given back.
				check := func(e *engine.Engine, key string, want int64) {
					t.Helper()
					if d := e.AllowAt(key, 0, t0); d.Remaining != want {
						t.Errorf("%s: Remaining %d after the panic, want %d", key, d.Remaining, want)
					}
				}
				check(e1, "x", 47)
				check(e2, "x", 38)
				check(e1, "y", 50)
				check(e2, "y", 40)
				for i := 0; i < k; i++ {
					check(e1, fmt.Sprintf("n%d", i), 50)
					check(e2, fmt.Sprintf("n%d", i), 40)
				}
				// The key that panicked can be created later, and other
				// keys too (no lock left held).
				done := make(chan struct{})
				go func() {
					defer close(done)
					if d := e1.AllowAt("boom", 1, t0); !d.Allowed {
						t.Errorf("boom refused after the panic: %+v", d)
					}
					for i := 0; i < 2000; i++ {
						e1.AllowAt(fmt.Sprintf("z%d", i), 1, t0)
					}
				}()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("engine hung after a KeyLimit panic")
				}
				r := e1.Audit()
				checkReportConsistent(t, r)
				want := int64(0)
				for i := 0; i < k; i++ {
					if i%3 != 1 {
						want++
					}
				}
				if r.Unadmits != want || r.UnadmitMissed != 0 {
					t.Errorf("Unadmits %d / missed %d, want %d / 0: %+v", r.Unadmits, r.UnadmitMissed, want, r)
				}
				if r.FalseAdmits != 0 && alg != engine.SlidingWindow && alg != engine.FixedWindow {
					t.Errorf("false admits after panic unwinding: %+v", r)
				}
			})
		}
	}
}

// runtime.Goexit inside KeyLimit (t.FailNow from a helper) is not a panic:
// the reservations made before must still be given back (deferred code
// runs on Goexit, recover() returns nil).
func TestAllowAllGoexitInKeyLimit(t *testing.T) {
	for _, k := range []int{1, 3, 8, 9, 12} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			var arm atomic.Bool
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 50, Window: time.Second, DisableEviction: true, KeyLimit: func(key string) int64 {
				if arm.Load() && key == "exit" {
					runtime.Goexit()
				}
				return 0
			}})
			e.AllowAt("x", 1, t0)
			reqs := []engine.Request{}
			for i := 0; i < k; i++ {
				reqs = append(reqs, engine.Request{Engine: e, Key: "x", N: 1})
			}
			reqs = append(reqs, engine.Request{Engine: e, Key: "exit", N: 1})
			arm.Store(true)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				engine.AllowAll(t0, reqs...)
			}()
			wg.Wait()
			arm.Store(false)
			if d := e.AllowAt("x", 0, t0); d.Remaining != 49 {
				t.Errorf("after Goexit in KeyLimit at request %d: Remaining %d, want 49 (%d units kept)", k, d.Remaining, 49-d.Remaining)
			}
		})
	}
}

// panic(nil) and a panic with an error value: preserved as they are.
func TestAllowAllPanicValues(t *testing.T) {
	sentinel := errors.New("sentinel")
	for _, v := range []any{nil, sentinel, "str", 0} {
		for _, k := range []int{0, 7, 8, 9} {
			t.Run(fmt.Sprintf("%v/%d", v, k), func(t *testing.T) {
				var arm atomic.Bool
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 50, Window: time.Second, DisableEviction: true, KeyLimit: func(key string) int64 {
					if arm.Load() && key == "p" {
						panic(v)
					}
					return 0
				}})
				e.AllowAt("x", 1, t0)
				reqs := []engine.Request{}
				for i := 0; i < k; i++ {
					reqs = append(reqs, engine.Request{Engine: e, Key: "x", N: 1})
				}
				reqs = append(reqs, engine.Request{Engine: e, Key: "p", N: 1})
				arm.Store(true)
				var got any
				func() {
					defer func() { got = recover() }()
					engine.AllowAll(t0, reqs...)
				}()
				arm.Store(false)
				want := v
				if v == nil {
					if _, ok := got.(*runtime.PanicNilError); !ok {
						t.Errorf("panic(nil): recovered %#v, want *runtime.PanicNilError", got)
					}
				} else if got != want {
					t.Errorf("recovered %#v, want %#v", got, want)
				}
				if d := e.AllowAt("x", 0, t0); d.Remaining != 49 {
					t.Errorf("Remaining %d, want 49", d.Remaining)
				}
			})
		}
	}
}
