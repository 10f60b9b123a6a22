package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Concurrent callers share round trips, and each gets its own key's answer:
// every caller has its own key and limit (KeyLimit), asks for varying n,
// and checks Limit and Remaining against its own exact count.
func TestBatchAttribution(t *testing.T) {
	s := redistest.Start(t)
	const callers = 48
	kl := func(k string) int64 {
		var i int64
		fmt.Sscanf(k, "c%d", &i)
		return 50 + i
	}
	l := mustNew(t, client(t, s), engine.Config{Limit: 1, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, KeyLimit: kl})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("c%d", i)
			limit := kl(key)
			used := int64(0)
			for j := range 40 {
				n := int64(1 + (i+j)%4)
				d, err := l.AllowN(ctx, key, n)
				if err != nil {
					errs <- err
					return
				}
				want := used+n <= limit
				if want {
					used += n
				}
				if d.Limit != limit || d.Allowed != want || d.Remaining != limit-used {
					errs <- fmt.Errorf("caller %d step %d n %d: %+v, want Allowed %v Limit %d Remaining %d", i, j, n, d, want, limit, limit-used)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, p := l.batch.rounds.Load(), l.batch.piped.Load()
	t.Logf("%d decisions in %d round trips, %d of them pipelines", callers*40, r, p)
	if p == 0 || r >= callers*40 {
		t.Fatalf("no batching: %d decisions in %d round trips, %d pipelines", callers*40, r, p)
	}
}

// The connection cut while a batch is in flight (the server ran the
// calls, the client sees EOF): every caller of that batch gets ErrNoReply
// and nothing admitted (Redis answers the confirmation: a lost connection
// is no outage, and no policy decides), none gets another caller's reply,
// and every later answer is its own key's exact count.
func TestCutDuringBatch(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	const callers = 32
	// No breaker: this test is about which caller a reply reaches, and
	// each failed call is followed at once by a peek that must reach Redis
	// (a lost connection never opens a breaker on a server that answers,
	// but this keeps the test about attribution).
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
	p.delay.Store(int64(time.Millisecond))
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	var failed atomic.Int64
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			key := fmt.Sprintf("c%d", i)
			used := int64(0)
			for j := range 30 {
				n := int64(1 + j%3)
				d, err := l.AllowN(ctx, key, n)
				if err != nil {
					if !errors.Is(err, ErrNoReply) || errors.Is(err, ErrUnavailable) || d.Allowed {
						errs <- fmt.Errorf("caller %d: %+v %v", i, d, err)
						return
					}
					failed.Add(1)
					// It may have been counted: learn the count again
					// (the peek may meet a cut too).
					for range 10 {
						if d, err = l.AllowN(ctx, key, 0); err == nil {
							break
						}
					}
					if err != nil {
						errs <- err
						return
					}
					if got := 1000 - d.Remaining; got != used && got != used+n {
						errs <- fmt.Errorf("caller %d: %d units after a failed call of %d, had %d", i, got, n, used)
						return
					}
					used = 1000 - d.Remaining
					continue
				}
				used += n
				if !d.Allowed || d.Remaining != 1000-used {
					errs <- fmt.Errorf("caller %d step %d: %+v, want Remaining %d", i, j, d, 1000-used)
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(20 * time.Millisecond)
	p.cut.Store(3)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d failed decisions, %d cuts, %d pipelines", failed.Load(), p.cuts.Load(), l.batch.piped.Load())
	if p.cuts.Load() == 0 || failed.Load() == 0 {
		t.Fatalf("no cut happened: %d cuts, %d failures", p.cuts.Load(), failed.Load())
	}
}

// SCRIPT FLUSH while concurrent callers' calls share pipelines: the calls
// that met NOSCRIPT did not run and are sent again, once; no other call is
// resent. Every caller's answers stay its own key's exact count, and Redis
// holds exactly the units admitted.
func TestScriptFlushDuringBatches(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const callers = 24
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	stop := make(chan struct{})
	flushes := 0
	var admitted atomic.Int64
	keys := make([]string, callers)
	for i := range callers {
		keys[i] = fmt.Sprintf("c%d", i)
		wg.Go(func() {
			used := int64(0)
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				n := int64(1 + j%2)
				d, err := l.AllowN(ctx, keys[i], n)
				if err != nil {
					errs <- err
					return
				}
				if used+n > 1000 {
					return
				}
				used += n
				admitted.Add(n)
				if !d.Allowed || d.Remaining != 1000-used {
					errs <- fmt.Errorf("caller %d step %d: %+v, want Remaining %d", i, j, d, 1000-used)
					return
				}
			}
		})
	}
	for range 10 {
		time.Sleep(5 * time.Millisecond)
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("%d script flushes: %d NOSCRIPT reloads, %d pipelines, stats %+v", flushes, st.NoScript, l.batch.piped.Load(), st)
	if st.NoScript == 0 || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
	if got := storedUnits(t, c, l, keys...); got != admitted.Load() {
		t.Fatalf("Redis holds %d units, %d were admitted", got, admitted.Load())
	}
}

// Every reply reaches its own caller: each goroutine has its own key and
// checks Remaining against its own count, while SCRIPT FLUSH runs every few
// ms and callers mix no-deadline, cancellable and deadline contexts.
func TestBatchAttributionWithScriptFlushes(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	admin := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer admin.Close()
	const L = 1 << 20
	l := mustNew(t, c, engine.Config{Limit: L, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	p.delay.Store(int64(500 * time.Microsecond))
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				admin.ScriptFlush(context.Background())
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			key := fmt.Sprint("own", g)
			var count int64
			for j := range 100 {
				n := int64(1 + (g+j)%7)
				var cx context.Context = context.Background()
				cancel := func() {}
				switch (g + j) % 3 {
				case 1:
					cx, cancel = context.WithCancel(cx)
				case 2:
					cx, cancel = context.WithTimeout(cx, 5*time.Second)
				}
				d, err := l.AllowN(cx, key, n)
				cancel()
				if err != nil {
					t.Errorf("%s: %v", key, err)
					return
				}
				count += n
				if !d.Allowed || d.Remaining != L-count || d.Limit != L {
					t.Errorf("%s call %d: %+v, want Remaining %d: another caller's reply", key, j, d, L-count)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("%+v", l.Stats())
}

// One strict key, a small limit, callers of all three context kinds behind
// a slow link that is sometimes cut: the admitted units must stay within
// Limit, and every admitted reply must be its own: the unit ranges
// [L-Remaining-n, L-Remaining) of admitted decisions never overlap. One
// seed; three with -long.
func TestHotKeyMixedContextsNeverOverAdmits(t *testing.T) {
	runs := 1
	if *long {
		runs = 3
	}
	for run := range runs {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64,
				DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
			defer c.Close()
			const L = 400
			l := mustNew(t, c, engine.Config{Limit: L, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
			if _, err := l.AllowN(ctx, "hot", 0); err != nil {
				t.Fatal(err)
			}
			p.delay.Store(int64(time.Millisecond))
			type adm struct{ lo, hi int64 }
			var mu sync.Mutex
			var adms []adm
			var admitted, may atomic.Int64
			var wg sync.WaitGroup
			stopCuts := make(chan struct{})
			go func() {
				for {
					select {
					case <-stopCuts:
						return
					case <-time.After(15 * time.Millisecond):
						p.cut.Store(1)
					}
				}
			}()
			for g := range 24 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), uint64(run)))
					for range 80 {
						n := int64(1 + r.IntN(4))
						cx, cancel := mixedContext(r, 3*time.Millisecond, 200*time.Microsecond, 4*time.Millisecond)
						d, err := l.AllowN(cx, "hot", n)
						cancel()
						switch {
						case err == nil && d.Allowed:
							admitted.Add(n)
							if d.Limit != L {
								t.Errorf("admitted with Limit %d", d.Limit)
							}
							mu.Lock()
							adms = append(adms, adm{L - d.Remaining - n, L - d.Remaining})
							mu.Unlock()
						case err != nil: // the policy's answer, or the caller's context ended
							if !errors.Is(err, errAbandoned) && err != cx.Err() { // a bare ctx error: asked nothing
								may.Add(n)
							}
						}
					}
				})
			}
			wg.Wait()
			close(stopCuts)
			p.cut.Store(0)
			p.delay.Store(0)
			l.batch.wait()
			time.Sleep(50 * time.Millisecond)
			got := storedUnits(t, client(t, s), l, "hot") // straight to the server, with patient timeouts
			t.Logf("admitted %d units, may-have-counted %d, Redis holds %d, cuts %d", admitted.Load(), may.Load(), got, p.cuts.Load())
			if admitted.Load() > L {
				t.Errorf("admitted %d > Limit %d", admitted.Load(), L)
			}
			if got < admitted.Load() || got > admitted.Load()+may.Load() {
				t.Errorf("Redis holds %d, want in [%d, %d]", got, admitted.Load(), admitted.Load()+may.Load())
			}
			sort.Slice(adms, func(i, j int) bool { return adms[i].lo < adms[j].lo })
			for i := 1; i < len(adms); i++ {
				if adms[i].lo < adms[i-1].hi {
					t.Errorf("admitted replies overlap: %v and %v (a reply reached the wrong caller)", adms[i-1], adms[i])
				}
			}
		})
	}
}

// "WRONGTYPE does not open it: another client's value at one key fails that
// key alone", also when that key's calls share pipelines with others.
func TestWrongTypeKeyFailsAloneInBatches(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	if err := c.Set(ctx, l.Key("bad"), "not a state", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "good0", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(3 * time.Millisecond))
	var goodFail, badOK atomic.Int64
	var sample atomic.Value
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			key := fmt.Sprint("good", i%4)
			if i%4 == 0 {
				key = "bad"
			}
			for j := range 60 {
				var cx context.Context = context.Background()
				cancel := func() {}
				if (i+j)%2 == 0 {
					cx, cancel = context.WithTimeout(cx, time.Second)
				}
				_, err := l.AllowN(cx, key, 1)
				cancel()
				if key == "bad" {
					if err == nil {
						badOK.Add(1)
					}
				} else if err != nil {
					goodFail.Add(1)
					sample.Store(err.Error())
				}
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("good keys failed %d (e.g. %v); bad key answered without error %d; %+v", goodFail.Load(), sample.Load(), badOK.Load(), st)
	if goodFail.Load() > 0 || st.BreakerOpens > 0 {
		if s, _ := sample.Load().(string); strings.Contains(s, "breaker") || st.BreakerOpens > 0 {
			t.Errorf("WRONGTYPE on one key opened the breaker (%d) / failed other keys %d times", st.BreakerOpens, goodFail.Load())
		} else {
			t.Errorf("WRONGTYPE on one key failed other keys %d times", goodFail.Load())
		}
	}
	if badOK.Load() > 0 {
		t.Errorf("the WRONGTYPE key was decided %d times", badOK.Load())
	}
}
