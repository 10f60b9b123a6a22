package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

type adv5Outcome int

const (
	adv5Admitted adv5Outcome = iota + 1
	adv5Denied
	adv5Nothing
	adv5May
	adv5Other
	adv5Before
)

// Every call on its own key: a "Redis counted nothing" error must leave its
// key empty; an admitted call leaves exactly its n; Stats must account for
// every decision exactly once; Failures == OnError calls.
func TestReview5CountedNothingMeansNothing(t *testing.T) {
	for _, breaker := range []bool{true, false} {
		t.Run(fmt.Sprint("breaker=", breaker), func(t *testing.T) {
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
			defer c.Close()
			var hook hookCounter
			opts := []Option{hook.opt()}
			if !breaker {
				opts = append(opts, WithBreaker(0, 0))
			}
			l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			if _, err := l.AllowN(ctx, "warm", 0); err != nil {
				t.Fatal(err)
			}
			p.delay.Store(int64(2 * time.Millisecond))
			const G, per = 24, 60
			out := make([][]adv5Outcome, G)
			ns := make([][]int64, G)
			var others atomic.Int64
			var sample atomic.Value
			var wg sync.WaitGroup
			for g := range G {
				out[g] = make([]adv5Outcome, per)
				ns[g] = make([]int64, per)
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 77))
					for j := range per {
						n := int64(1 + r.IntN(5))
						ns[g][j] = n
						var cx context.Context
						var cancel context.CancelFunc
						switch r.IntN(3) {
						case 0:
							cx, cancel = context.Background(), func() {}
						case 1:
							cx, cancel = context.WithCancel(context.Background())
							tm := time.AfterFunc(time.Duration(r.IntN(4000))*time.Microsecond, cancel)
							defer tm.Stop()
						default:
							cx, cancel = context.WithTimeout(context.Background(), time.Duration(100+r.IntN(5000))*time.Microsecond)
						}
						d, err := l.AllowN(cx, fmt.Sprintf("k%d-%d", g, j), n)
						cancel()
						var o adv5Outcome
						switch {
						case err == nil && d.Allowed:
							o = adv5Admitted
						case err == nil:
							o = adv5Denied
						case d.Allowed:
							o = adv5Other // only Redis's answer or the breaker's may admit
							others.Add(1)
							sample.Store(fmt.Sprintf("%+v %v", d, err))
						case strings.Contains(err.Error(), "counted nothing"):
							o = adv5Nothing
						case strings.Contains(err.Error(), "may have counted"):
							o = adv5May
						case errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "breaker is open"):
							o = adv5Nothing // no round trip made
						case !errors.Is(err, ErrUnavailable) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
							o = adv5Before
						default:
							o = adv5Other
							others.Add(1)
							sample.Store(fmt.Sprintf("%+v %v", d, err))
						}
						out[g][j] = o
					}
				})
			}
			wg.Wait()
			p.delay.Store(0)
			l.batch.wait()
			time.Sleep(50 * time.Millisecond)
			if others.Load() > 0 {
				t.Errorf("%d unclassified outcomes, e.g. %v", others.Load(), sample.Load())
			}
			cnt := map[adv5Outcome]int{}
			var bad []string
			for g := range G {
				for j := range per {
					o := out[g][j]
					cnt[o]++
					got := storedUnits(t, c, l, fmt.Sprintf("k%d-%d", g, j))
					switch o {
					case adv5Admitted:
						if got != ns[g][j] {
							bad = append(bad, fmt.Sprintf("admitted k%d-%d n=%d stored %d", g, j, ns[g][j], got))
						}
					case adv5Nothing, adv5Before, adv5Denied:
						if got != 0 {
							bad = append(bad, fmt.Sprintf("outcome %d k%d-%d n=%d stored %d", o, g, j, ns[g][j], got))
						}
					case adv5May:
						if got != 0 && got != ns[g][j] {
							bad = append(bad, fmt.Sprintf("may k%d-%d n=%d stored %d", g, j, ns[g][j], got))
						}
					}
				}
			}
			st := l.Stats()
			t.Logf("outcomes %v stats %+v hook %d", cnt, st, hook.n.Load())
			if len(bad) > 0 {
				t.Errorf("%d keys disagree, e.g. %v", len(bad), bad[:min(5, len(bad))])
			}
			if st.Failures != uint64(hook.n.Load()) {
				t.Errorf("Failures %d != OnError calls %d", st.Failures, hook.n.Load())
			}
			if st.RedisDecisions != uint64(cnt[adv5Admitted]+cnt[adv5Denied]+1) {
				t.Errorf("RedisDecisions %d, want %d", st.RedisDecisions, cnt[adv5Admitted]+cnt[adv5Denied]+1)
			}
			if st.FallbackDecisions+st.CallerGone != uint64(cnt[adv5Nothing]+cnt[adv5May]+cnt[adv5Before]) {
				t.Errorf("FallbackDecisions %d + CallerGone %d, want %d", st.FallbackDecisions, st.CallerGone, cnt[adv5Nothing]+cnt[adv5May]+cnt[adv5Before])
			}
		})
	}
}

// A slow but alive server (every reply 15 ms late) and callers that all
// have deadlines shorter than that: Redis answers every round trip, so the
// breaker must not stay open (README: "If Redis answered others lately ...
// the breaker stays closed").
func TestReview5SlowServerDeadlineOnlyBreaker(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	if _, err := l.AllowN(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(15 * time.Millisecond))
	var breakerAnswers, nothing, may, real atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				d, err := l.AllowN(cx, "k", 1)
				cancel()
				switch {
				case err == nil && d.Allowed:
					real.Add(1)
				case err != nil && strings.Contains(err.Error(), "breaker is open"):
					breakerAnswers.Add(1)
					time.Sleep(time.Millisecond)
				case err != nil && strings.Contains(err.Error(), "counted nothing"):
					nothing.Add(1)
				case err != nil && strings.Contains(err.Error(), "may have counted"):
					may.Add(1)
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	st := l.Stats()
	t.Logf("real %d nothing %d may %d breaker-answers %d; stats %+v", real.Load(), nothing.Load(), may.Load(), breakerAnswers.Load(), st)
	if st.BreakerOpens > 0 {
		t.Errorf("the breaker opened %d times (%d decisions answered by it) while Redis answered every round trip within 15 ms", st.BreakerOpens, breakerAnswers.Load())
	}
}

// A real stall with callers that all have short deadlines and a client
// whose ReadTimeout is long (go-redis's default-like 3 s): the breaker must
// open (no round trip succeeds), so that decisions stop waiting out their
// deadlines.
func TestReview5StallDeadlineOnlyOpens(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 64, ReadTimeout: 3 * time.Second})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	stop := make(chan struct{})
	var slow atomic.Int64
	var wg sync.WaitGroup
	var stalled atomic.Bool
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				t0 := time.Now()
				_, _ = l.AllowN(cx, "k", 1)
				cancel()
				if stalled.Load() && time.Since(t0) > 10*time.Millisecond {
					slow.Add(1)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	s.Signal(syscall.SIGSTOP)
	stalled.Store(true)
	time.Sleep(1200 * time.Millisecond)
	st := l.Stats()
	close(stop)
	wg.Wait()
	s.Signal(syscall.SIGCONT)
	t.Logf("stats during stall %+v; decisions that waited > 10 ms during the stall: %d", st, slow.Load())
	if st.BreakerOpens == 0 {
		t.Errorf("a 1.2 s stall with only deadline callers never opened the breaker: %d decisions waited out their deadline", slow.Load())
	}
}
