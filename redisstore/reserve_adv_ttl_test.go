package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// design §12: "a key's state expires one Window plus one sub-window after
// its last write, when x has left the window"; SlidingWindowStrict counts
// a unit of sub-window x until the window no longer holds x, that is in
// sub-windows x … x+N. With a sub-window that is not a whole number of
// milliseconds (allowed: whole microseconds), a TTL rounded to the
// millisecond must not let the state expire while x still counts. The
// verdict is on Redis's grid: with Limit 1, the next admission after one
// in sub-window x is in sub-window x+N+1 or later.
func TestAdvStrictStateOutlivesItsWindow(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, tc := range []struct {
		window time.Duration
		n      int
	}{{3 * time.Millisecond, 2}, {2500 * time.Microsecond, 5}, {4500 * time.Microsecond, 3}, {1500 * time.Microsecond, 1}} {
		cfg := engine.Config{Limit: 1, Window: tc.window, SubWindows: tc.n, Algorithm: engine.SlidingWindowStrict}
		l := mustNew(t, c, cfg, WithPrefix("ttl:"+tc.window.String()+":"))
		width := tc.window / time.Duration(tc.n)
		var last time.Time
		early := 0
		for admitted := 0; admitted < 100; {
			r, err := l.Reserve(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Units() == 0 {
				continue
			}
			if !last.IsZero() && r.At().Sub(last) < time.Duration(tc.n+1)*width {
				early++
				t.Errorf("window %v, N %d: admitted in the sub-window at %v, %v after the one at %v, which still counts (want ≥ %v)",
					tc.window, tc.n, r.At().Format("15:04:05.000000"), r.At().Sub(last), last.Format("15:04:05.000000"), time.Duration(tc.n+1)*width)
				if early > 3 {
					t.FailNow()
				}
			}
			last = r.At()
			admitted++
		}
	}
}
