// Package peers compares ringlimit's engine with other in-process Go rate
// limiters behind one small interface. It is a separate module so that the
// peers never enter ringlimit's own go.mod; run.sh runs the comparison and
// writes RESULTS.md.
//
// Every adapter is written against the peer's public API in the way its
// documentation suggests for per-key limiting; none of the peers' code is
// copied here.
package peers

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	"github.com/puzpuzpuz/xsync/v3"
	"github.com/ringlimit/ringlimit/engine"
	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Limiter is what the benchmarks drive: one request for key, admitted or
// not.
type Limiter interface {
	Allow(key string) bool
	// Close releases whatever the limiter runs in the background.
	Close()
}

// Peer is a named constructor. New gives a limiter admitting limit
// requests per window per key; it panics on a configuration the peer
// rejects, since the harness has no other use for the error.
type Peer struct {
	Name string
	// Kind is the algorithm, for the reader of RESULTS.md.
	Kind string
	New  func(limit int64, window time.Duration) Limiter
	// Frozen: the limiter decides at the fixed instant of its creation
	// (ringlimit's AllowAt with the caller's time), so it never refills.
	Frozen bool
}

// Peers is the comparison table, in the order the tables list them.
var Peers = []Peer{
	{"ringlimit-sliding", "sliding window counter, 10 sub-windows, lock-free", ringlimitPeer(engine.SlidingWindow, 0), false},
	{"ringlimit-sliding-coarse", "same, 1ms cached clock", ringlimitPeer(engine.SlidingWindow, time.Millisecond), false},
	{"ringlimit-sliding-at", "same, AllowAt with the caller's time, reading Remaining", ringlimitAtPeer(engine.SlidingWindow), true},
	{"ringlimit-sliding-1m", "same, Config.ExpectedKeys 1,000,000 (the key table presized)", ringlimitExpectedPeer(engine.SlidingWindow, 1_000_000), false},
	{"ringlimit-strict", "strict sliding window, 10 sub-windows", ringlimitPeer(engine.SlidingWindowStrict, 0), false},
	{"ringlimit-strict-coarse", "same, 1ms cached clock", ringlimitPeer(engine.SlidingWindowStrict, time.Millisecond), false},
	{"ringlimit-fixed", "fixed window", ringlimitPeer(engine.FixedWindow, 0), false},
	{"ringlimit-fixed-coarse", "same, 1ms cached clock", ringlimitPeer(engine.FixedWindow, time.Millisecond), false},
	{"ringlimit-token", "token bucket (GCRA), one word per key, lock-free", ringlimitPeer(engine.TokenBucket, 0), false},
	{"ringlimit-token-coarse", "same, 1ms cached clock", ringlimitPeer(engine.TokenBucket, time.Millisecond), false},
	{"ringlimit-token-at", "same, AllowAt with the caller's time, reading Remaining", ringlimitAtPeer(engine.TokenBucket), true},
	{"xrate-syncmap", "token bucket (golang.org/x/time/rate), per-key limiter in sync.Map", newXRateSyncMap, false},
	{"xrate-xsync", "token bucket (golang.org/x/time/rate), per-key limiter in xsync.MapOf", newXRateXsync, false},
	{"httprate", "two-window weighted counter (go-chi/httprate local counter), one mutex", newHTTPRate, false},
	{"sethvargo", "interval-refilled bucket (sethvargo/go-limiter memorystore)", newSethvargo, false},
	{"ulule", "fixed window from first hit (ulule/limiter memory store)", newUlule, false},
	{"throttled", "GCRA (throttled/throttled memstore)", newThrottled, false},
}

// ---- ringlimit ----

type ringlimitLimiter struct{ e *engine.Engine }

func (l ringlimitLimiter) Allow(key string) bool { return l.e.Allow(key) }
func (l ringlimitLimiter) Close()                { l.e.Close() }

func ringlimitPeer(alg engine.Algorithm, coarse time.Duration) func(int64, time.Duration) Limiter {
	return func(limit int64, window time.Duration) Limiter {
		e, err := engine.New(engine.Config{Limit: limit, Window: window, Algorithm: alg, CoarseClock: coarse})
		must(err)
		return ringlimitLimiter{e}
	}
}

// ringlimitExpectedPeer is ringlimitPeer with Config.ExpectedKeys n.
func ringlimitExpectedPeer(alg engine.Algorithm, n int64) func(int64, time.Duration) Limiter {
	return func(limit int64, window time.Duration) Limiter {
		e, err := engine.New(engine.Config{Limit: limit, Window: window, Algorithm: alg, ExpectedKeys: n})
		must(err)
		return ringlimitLimiter{e}
	}
}

// ---- golang.org/x/time/rate: one token bucket per key ----

// xrateParams turns "limit per window" into a token bucket that refills
// limit tokens per window and holds at most limit.
func xrateParams(limit int64, window time.Duration) (rate.Limit, int) {
	return rate.Limit(float64(limit) / window.Seconds()), int(limit)
}

type xrateSyncMap struct {
	m     sync.Map // string → *rate.Limiter
	r     rate.Limit
	burst int
}

func newXRateSyncMap(limit int64, window time.Duration) Limiter {
	l := &xrateSyncMap{}
	l.r, l.burst = xrateParams(limit, window)
	return l
}

func (l *xrateSyncMap) Allow(key string) bool {
	if v, ok := l.m.Load(key); ok {
		return v.(*rate.Limiter).Allow()
	}
	v, _ := l.m.LoadOrStore(key, rate.NewLimiter(l.r, l.burst))
	return v.(*rate.Limiter).Allow()
}

func (l *xrateSyncMap) Close() {}

type xrateXsync struct {
	m     *xsync.MapOf[string, *rate.Limiter]
	r     rate.Limit
	burst int
}

func newXRateXsync(limit int64, window time.Duration) Limiter {
	l := &xrateXsync{m: xsync.NewMapOf[string, *rate.Limiter]()}
	l.r, l.burst = xrateParams(limit, window)
	return l
}

func (l *xrateXsync) Allow(key string) bool {
	if v, ok := l.m.Load(key); ok {
		return v.Allow()
	}
	v, _ := l.m.LoadOrStore(key, rate.NewLimiter(l.r, l.burst))
	return v.Allow()
}

func (l *xrateXsync) Close() {}

// ---- go-chi/httprate: its in-memory LimitCounter, decided the way the
// middleware decides ----

// httprateLimiter reproduces the middleware's decision (RateLimiter.OnLimit)
// without HTTP: under one mutex, read the current and previous window's
// counts, estimate prev·(remaining share of the window) + curr, refuse if
// the rounded estimate plus this request exceeds the limit, else
// increment. The middleware holds its own mutex across the read and the
// increment in the same way; without it two requests could both pass.
// Windows are wall-clock aligned, as httprate aligns them for any counter
// other than its default (it offsets the default one by its start instant,
// which changes nothing here).
type httprateLimiter struct {
	mu      sync.Mutex
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
}

func newHTTPRate(limit int64, window time.Duration) Limiter {
	return &httprateLimiter{counter: httprate.NewLocalLimitCounter(window), limit: int(limit), window: window}
}

func (l *httprateLimiter) Allow(key string) bool {
	now := time.Now().UTC()
	cur := now.Truncate(l.window)
	prev := cur.Add(-l.window)
	l.mu.Lock()
	defer l.mu.Unlock()
	c, p, err := l.counter.Get(key, cur, prev)
	if err != nil {
		return false
	}
	est := float64(p)*(float64(l.window)-float64(now.Sub(cur)))/float64(l.window) + float64(c)
	if int(math.Round(est))+1 > l.limit {
		return false
	}
	return l.counter.IncrementBy(key, cur, 1) == nil
}

func (l *httprateLimiter) Close() {}

// ---- sethvargo/go-limiter memorystore ----

type sethvargoLimiter struct{ s sethvargo.Store }

func newSethvargo(limit int64, window time.Duration) Limiter {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: window})
	must(err)
	return sethvargoLimiter{s}
}

func (l sethvargoLimiter) Allow(key string) bool {
	_, _, _, ok, err := l.s.Take(context.Background(), key)
	return ok && err == nil
}

func (l sethvargoLimiter) Close() { _ = l.s.Close(context.Background()) }

// ---- ulule/limiter memory store ----

type ululeLimiter struct{ l *ulule.Limiter }

func newUlule(limit int64, window time.Duration) Limiter {
	return ululeLimiter{ulule.New(ululemem.NewStore(), ulule.Rate{Period: window, Limit: limit})}
}

func (l ululeLimiter) Allow(key string) bool {
	c, err := l.l.Get(context.Background(), key)
	return err == nil && !c.Reached
}

// Close: the memory store stops its cleaner from a finalizer; it has no
// Close of its own.
func (l ululeLimiter) Close() {}

// ---- throttled/throttled GCRA over memstore ----

type throttledLimiter struct{ g *throttled.GCRARateLimiterCtx }

// newThrottled admits limit at once (MaxBurst limit−1, since GCRA admits
// MaxBurst+1 in a burst) and refills at limit per window. memstore with
// maxKeys 0 is a plain map under an RWMutex (no LRU, so nothing is
// evicted).
func newThrottled(limit int64, window time.Duration) Limiter {
	st, err := memstore.NewCtx(0)
	must(err)
	g, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(limit), window),
		MaxBurst: int(limit) - 1,
	})
	must(err)
	return throttledLimiter{g}
}

// Allow counts an error (GCRA gives up after 10 lost CAS races on one
// key) as a denial.
func (l throttledLimiter) Allow(key string) bool {
	limited, _, err := l.g.RateLimitCtx(context.Background(), key, 1)
	return err == nil && !limited
}

func (l throttledLimiter) Close() {}

func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("peers: %v", err))
	}
}
