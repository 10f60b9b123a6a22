package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Issue 12: a deploy that changes the sub-window width. Before the
// geometry was in the key name, a wider sub-window (SubWindows 10→1)
// computed epochs smaller than the newest one the old replicas had stored,
// the script clamped to it, and the window froze: at half the limit, 7 of
// 27 requests were denied. A narrower one read the old counts as its own.
// Now the new limiter uses its own key, and every decision matches a fresh
// engine driven at the Redis time of the decision; at half the limit none
// is denied.
func TestGeometryChange(t *testing.T) {
	s := redistest.Start(t)
	const limit = 10
	const window = 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		old, new engine.Config
	}{
		{"SubWindows 10 to 1", engine.Config{Limit: limit, Window: window, SubWindows: 10}, engine.Config{Limit: limit, Window: window, SubWindows: 1}},
		{"SubWindows 1 to 10", engine.Config{Limit: limit, Window: window, SubWindows: 1}, engine.Config{Limit: limit, Window: window, SubWindows: 10}},
		{"Sliding to Fixed", engine.Config{Limit: limit, Window: window, SubWindows: 10}, engine.Config{Limit: limit, Window: window, Algorithm: engine.FixedWindow}},
		{"Window 200ms to 400ms", engine.Config{Limit: limit, Window: window, SubWindows: 4}, engine.Config{Limit: 2 * limit, Window: 2 * window, SubWindows: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := client(t, s)
			prefix := "geo:" + tc.name + ":"
			old := mustNew(t, c, tc.old, WithPrefix(prefix))
			nw := mustNew(t, c, tc.new, WithPrefix(prefix))
			if old.Key("k") == nw.Key("k") {
				t.Fatalf("both geometries use the key %q", old.Key("k"))
			}
			// The old replicas fill the key's window, and keep deciding
			// while the new ones start (a rolling deploy's overlap).
			for range limit {
				if d, err := old.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("old: %+v %v", d, err)
				}
			}
			oldState, err := c.Get(ctx, old.Key("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			ref := engineRef(t, tc.new)
			tick := time.NewTicker(2 * tc.new.Window / time.Duration(tc.new.Limit)) // half the new limit per window
			defer tick.Stop()
			denied := 0
			for i := range 27 {
				<-tick.C
				got, at, err := nw.eval(ctx, "k", 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				if want := ref.AllowAt("k", 1, at); got != want {
					t.Fatalf("request %d at %v: redis %+v, a fresh engine %+v", i, at.Format(time.RFC3339Nano), got, want)
				}
				if !got.Allowed {
					denied++
				}
				if i == 0 {
					// The old key is untouched and the new one holds this
					// request's unit, unless a key has expired (its TTL
					// is W + w, which a loaded machine may take to get
					// here): the checks do not depend on the machine's speed.
					if now, err := c.Get(ctx, old.Key("k")).Result(); err != redis.Nil && (err != nil || now != oldState) {
						t.Fatalf("after the new geometry's first request: the old key's state changed (%v; it held %d units, now %d)", err, limit, storedUnits(t, c, old, "k"))
					}
					if n := storedUnits(t, c, nw, "k"); n != 1 && c.Exists(ctx, nw.Key("k")).Val() == 1 {
						t.Fatalf("after the new geometry's first request: the new key holds %d units, want 1", n)
					}
				}
			}
			if denied > 0 {
				t.Fatalf("%d of 27 requests denied at half the limit", denied)
			}
		})
	}
}

// Key's format: the escaped key in the hash tag, then the geometry; the
// geometry never changes the Cluster slot.
func TestKeyFormat(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		cfg  engine.Config
		want string
	}{
		{engine.Config{Limit: 5, Window: time.Second}, "ringlimit:{a\\(b}:w100000n10"},
		{engine.Config{Limit: 5, Window: time.Second, SubWindows: 4, Algorithm: engine.SlidingWindowStrict}, "ringlimit:{a\\(b}:w250000n4"},
		{engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.FixedWindow}, "ringlimit:{a\\(b}:w60000000n0"},
	} {
		l, err := New(c, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Key("a{b"); got != tc.want {
			t.Errorf("%+v: Key = %q, want %q", tc.cfg, got, tc.want)
		}
		_ = l.Close()
	}
	// SlidingWindow and SlidingWindowStrict share keys: the same counts.
	a, _ := New(c, engine.Config{Limit: 5, Window: time.Second})
	b, _ := New(c, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingWindowStrict})
	if a.Key("k") != b.Key("k") {
		t.Errorf("Sliding %q and Strict %q differ", a.Key("k"), b.Key("k"))
	}
}

// A limit change keeps the key and its counts: the new limit applies to
// the counts already there, from the next decision.
func TestLimitChangeKeepsCounts(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	a := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	b := mustNew(t, c, engine.Config{Limit: 4, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	for range 6 {
		if d, err := a.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	d, err := b.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.Remaining != 0 || d.Limit != 4 {
		t.Fatalf("the lower limit over 6 counted units: %+v %v", d, err)
	}
	if d, err := a.AllowN(context.Background(), "k", 4); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("%+v %v", d, err)
	}
	if got := storedUnits(t, c, a, "k"); got != 10 {
		t.Fatalf("stored %d, want 10", got)
	}
}

// The packed ring moving by every distance: 0, 1 … N and more than N
// sub-windows between two decisions on a key, for each algorithm, every
// decision (admission, denial, RetryAfter, Remaining) compared with the
// engine at the Redis time the script used, and the stored state checked
// (mid agrees with the ring).
func TestRingMoves(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			const n = 5
			cfg := engine.Config{Limit: 9, Window: 50 * time.Millisecond, SubWindows: n, Algorithm: alg}
			width := cfg.Window / n
			l := mustNew(t, c, cfg, WithPrefix("moves:"+alg.String()+":"))
			ref := engineRef(t, cfg)
			rng := rand.New(rand.NewPCG(3, uint64(alg)))
			moved := map[int]bool{}
			for i := range 160 {
				gap := rng.IntN(n + 3) // sub-windows to wait: 0 … N+2
				if rng.IntN(2) == 0 {
					gap = 0
				}
				time.Sleep(time.Duration(gap) * width)
				moved[gap] = true
				k := int64(1 + rng.IntN(4))
				got, at, err := l.eval(ctx, "k", k, 0)
				if err != nil {
					t.Fatal(err)
				}
				if want := ref.AllowAt("k", k, at); got != want {
					t.Fatalf("step %d (after %d sub-windows) n %d at %v: redis %+v, engine %+v", i, gap, k, at.Format(time.RFC3339Nano), got, want)
				}
				storedUnits(t, c, l, "k")
			}
			if len(moved) < n+3 {
				t.Fatalf("gaps covered: %v", moved)
			}
		})
	}
}
