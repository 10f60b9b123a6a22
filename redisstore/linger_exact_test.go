package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// WithLinger refuses the extreme durations too (the smallest and largest
// time.Duration), naming the option and both ends of its range.
func TestWithLingerExtremesRefused(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 10, Window: time.Second}
	for _, d := range []time.Duration{math.MinInt64, math.MaxInt64, -1, time.Millisecond + 1} {
		_, err := New(client(t, s), cfg, WithLinger(d))
		if err == nil {
			t.Fatalf("WithLinger(%d) accepted", int64(d))
		}
		msg := err.Error()
		if !strings.Contains(msg, "WithLinger") || !strings.Contains(msg, "1ms") || !strings.Contains(msg, "0") {
			t.Errorf("WithLinger(%d): %q does not name the option and its range 0 … 1ms", int64(d), msg)
		}
	}
}

// With the longest linger, many concurrent callers on one key, a third of
// them cancelling or with deadlines shorter than the linger: the key never
// admits past its limit (300; 5000 admits every call that stays), every admission is in Redis, and Redis counts a
// call that was not admitted only when its error says Redis may have
// counted it.
func TestLingerPlainExactWithLeavingCallers(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, tc := range []struct {
		limit  int64
		linger time.Duration
	}{{300, time.Millisecond}, {300, DefaultLinger}, {5000, time.Millisecond}, {5000, DefaultLinger}} {
		limit, linger := tc.limit, tc.linger
		l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour}, WithLinger(linger), WithFailurePolicy(FailOpen))
		key := fmt.Sprint("exact-", limit, linger)
		var admitted, mayCount, gone, other atomic.Int64
		var wg sync.WaitGroup
		for g := range 24 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 7))
				for range 60 {
					var cx context.Context
					var cancel func()
					switch r.IntN(4) {
					case 0:
						cx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(400))*time.Microsecond)
					case 1:
						var cf context.CancelFunc
						cx, cf = context.WithCancel(context.Background())
						tm := time.AfterFunc(time.Duration(r.IntN(300))*time.Microsecond, cf)
						cancel = func() { tm.Stop(); cf() }
					case 2:
						cx, cancel = context.WithTimeout(context.Background(), time.Minute)
					default:
						cx, cancel = context.Background(), func() {}
					}
					d, err := l.AllowN(cx, key, 1)
					cancel()
					switch {
					case err == nil:
						if d.Allowed {
							admitted.Add(1)
						}
					case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
						gone.Add(1)
						if d.Allowed {
							t.Errorf("a caller gone admitted: %+v %v", d, err)
						}
						if errors.Is(err, ErrUnavailable) {
							t.Errorf("a caller gone got the policy: %v", err)
						}
						if strings.Contains(err.Error(), "may have counted") {
							mayCount.Add(1)
						}
					default:
						other.Add(1)
						t.Errorf("unexpected error on a healthy server: %+v %v", d, err)
					}
				}
			})
		}
		wg.Wait()
		l.batch.wait()
		stored := storedUnits(t, c, l, key)
		st := l.Stats()
		t.Logf("linger %v: admitted %d, stored %d, gone %d (may have counted %d), stats %+v", linger, admitted.Load(), stored, gone.Load(), mayCount.Load(), st)
		if admitted.Load() > limit {
			t.Errorf("linger %v: %d admitted past the limit %d", linger, admitted.Load(), limit)
		}
		if stored < admitted.Load() {
			t.Errorf("linger %v: %d admitted but Redis holds %d: admissions lost", linger, admitted.Load(), stored)
		}
		if stored > admitted.Load()+mayCount.Load() {
			t.Errorf("linger %v: Redis holds %d, but %d admitted and only %d errors said Redis may have counted the call", linger, stored, admitted.Load(), mayCount.Load())
		}
		if uint64(gone.Load()) != st.CallerGone || st.Failures != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
			t.Errorf("linger %v: %d callers gone, stats %+v", linger, gone.Load(), st)
		}
	}
}
