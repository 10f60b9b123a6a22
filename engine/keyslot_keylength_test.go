package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Keys of every length the engine holds, from 0 to MaxKeyBytes (small caps
// around the home slab's 7-byte head, the default, and the 1 MiB ceiling),
// each with near twins (one byte changed at its end, its start, or just
// past the head; a trailing NUL), never share a count: after each key in
// turn uses up its limit, every key used so far reads 0 remaining and
// every other key its whole limit; after a Reset of every other key, those
// read their whole limit again and the rest still 0.
func TestKeysOfEveryLengthKeepTheirOwnCounts(t *testing.T) {
	caps := []int{1, 7, 8, 9, 15, 16, 72, 0}
	geos := []engine.Config{
		{Algorithm: engine.SlidingWindow},
		{Algorithm: engine.SlidingWindowStrict, SubWindows: 4},
		{Algorithm: engine.FixedWindow},
		{Algorithm: engine.SlidingLog},
		{Algorithm: engine.TokenBucket},
		{SubWindows: 50, PerKeyLimits: true},
		{SubWindows: 1, KeyLimit: func(string) int64 { return 3 }},
	}
	t.Run("ceiling", func(t *testing.T) { // keys of up to 1 MiB
		e, err := engine.New(engine.Config{Limit: 3, Window: time.Second, MaxKeyBytes: engine.MaxKeyBytesCeiling,
			Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0))})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		checkOwnCounts(t, e, lengthKeys(engine.MaxKeyBytesCeiling))
	})
	for _, maxBytes := range caps {
		for _, g := range geos {
			t.Run(fmt.Sprintf("max%d/%s/n%d", maxBytes, g.Algorithm, g.SubWindows), func(t *testing.T) {
				cfg := g
				cfg.Limit, cfg.Window, cfg.MaxKeyBytes = 3, time.Second, maxBytes
				cfg.Clock = engine.NewManualClock(time.Unix(1_700_000_000, 0))
				e, err := engine.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				checkOwnCounts(t, e, lengthKeys(e.Config().MaxKeyBytes))
			})
		}
	}
}

func lengthKeys(maxBytes int) []string {
	var keys []string
	seen := map[string]bool{}
	add := func(k string) {
		if len(k) <= maxBytes && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	lengths := []int{0, 1, 2, 6, 7, 8, 9, 15, 16, 17, 23, 24, 63, 64, 71, 72, 73, 127, 128, 200, maxBytes - 1, maxBytes}
	for _, n := range lengths {
		if n < 0 {
			continue
		}
		base := strings.Repeat("\x00", n)
		add(base)
		add(base + "\x00")
		if n == 0 {
			continue
		}
		for _, at := range []int{0, n - 1, min(7, n-1), min(8, n-1)} {
			b := []byte(base)
			b[at] = 0x80
			add(string(b))
			b[at] = 'z'
			add(string(b))
		}
	}
	return keys
}

func checkOwnCounts(t *testing.T, e *engine.Engine, keys []string) {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	short := func(k string) string { return fmt.Sprintf("len %d %q", len(k), k[:min(len(k), 10)]) }
	for i, k := range keys {
		if d := e.AllowAt(k, 3, now); !d.Allowed {
			t.Fatalf("key %s (%d of %d) refused its limit on first use: %+v", short(k), i, len(keys), d)
		}
		if i%4 != 3 && i != len(keys)-1 {
			continue // the full check every few keys: it is quadratic
		}
		for j, o := range keys {
			want := int64(3)
			if j <= i {
				want = 0
			}
			if d := e.AllowAt(o, 0, now); d.Remaining != want {
				t.Fatalf("after %d keys used up, key %s (%d) reads %d remaining, want %d", i+1, short(o), j, d.Remaining, want)
			}
		}
	}
	for j, k := range keys {
		if j%2 == 0 && !e.Reset(k) {
			t.Fatalf("Reset(%s) found no state", short(k))
		}
	}
	for j, k := range keys {
		want := int64(0)
		if j%2 == 0 {
			want = 3
		}
		if d := e.AllowAt(k, 0, now); d.Remaining != want {
			t.Fatalf("after the Resets, key %s (%d) reads %d remaining, want %d", short(k), j, d.Remaining, want)
		}
	}
	if got := e.Len(); got != int64(len(keys)) {
		t.Fatalf("Len %d, want %d keys", got, len(keys))
	}
}
