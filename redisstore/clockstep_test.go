package redisstore

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// packState builds a key's state (see luaSource): newest epoch l, mid, and
// the ring of counts of epochs l−span … l.
func packState(l int64, counts []int64) string {
	b := make([]byte, 8*(len(counts)+2))
	var mid int64
	for k := 1; k < len(counts)-1; k++ {
		mid += counts[k]
	}
	put := func(i int, v int64) { binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(v))) }
	put(0, l)
	put(1, mid)
	for i, c := range counts {
		put(2+i, c)
	}
	return string(b)
}

// A backward step of the Redis host's clock: TIME is behind the key's newest
// sub-window (written here as a state 15 s in TIME's future, which is what
// Redis holds after a 15 s step back). The script's time does not run
// backwards for the key: the decision is made at the start of that
// sub-window, and a denial's RetryAfter adds the lag, so it is a true bound
// (the reference: the engine at that sub-window's start, plus the lag).
// Before, RetryAfter left the lag out: a full key stayed denied 16 s while
// every denial said at most 1.1 s.
func TestClockStepBackKeepsRetryAfterTrue(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 6, Window: time.Second, SubWindows: 10, Algorithm: alg}
			l := mustNew(t, c, cfg, WithPrefix("step:"+alg.String()+":"))
			_, now, err := l.eval(ctx, "probe", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			w := l.width / 1000 // µs
			ahead := int64(15 * time.Second / time.Microsecond)
			newest := (now.UnixMicro() + ahead) / w // the key's newest epoch, 15 s ahead of TIME
			counts := make([]int64, l.span+1)
			top := int64(6) // c_l: the units in the newest sub-window
			if l.span > 1 {
				top, counts[1] = 4, 2 // two more in an older one
			}
			counts[l.span] = top
			if err := c.Set(ctx, l.Key("k"), packState(newest, counts), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			// The reference: an engine that saw the same units, asked at the
			// start of epoch newest.
			ref := engineRef(t, cfg)
			start := time.UnixMicro(newest * w)
			if l.span > 1 {
				ref.AllowAt("k", 2, start.Add(-time.Duration(l.span-1)*time.Duration(l.width)))
			}
			ref.AllowAt("k", top, start)
			want := ref.AllowAt("k", 1, start)

			got, at, err := l.eval(ctx, "k", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			lag := time.Duration(newest*w-at.UnixMicro()) * time.Microsecond
			if lag < 14*time.Second {
				t.Fatalf("the state is only %v ahead of TIME", lag)
			}
			if want.Allowed || got.Allowed {
				t.Fatalf("a full key admitted: redis %+v, engine %+v", got, want)
			}
			if got.RetryAfter != want.RetryAfter+lag {
				t.Fatalf("RetryAfter %v, want the engine's %v at the key's newest sub-window plus the lag %v = %v", got.RetryAfter, want.RetryAfter, lag, want.RetryAfter+lag)
			}
			// An admission while TIME is behind counts into the key's newest
			// sub-window: the state's epoch does not move back.
			if d, _, err := l.eval(ctx, "k", 0, 0); err != nil || d.Remaining != 0 {
				t.Fatalf("peek: %+v, %v", d, err)
			}
			raw, err := c.Get(ctx, l.Key("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if e, _ := decodeState(t, raw, l.span); e != newest {
				t.Fatalf("the key's newest epoch moved from %d to %d", newest, e)
			}
		})
	}
}
