package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The pool logs every failed dial; the tests kill servers on purpose.
func init() { redistest.QuietClientLogs() }

// client returns a client of s with go-redis retries off, closed when the
// test ends. Its timeouts (10 s) are hang bounds: a healthy server on a
// loaded machine is never given up on.
func client(tb testing.TB, s *redistest.Server) *redis.Client {
	return newClient(tb, s, 10*time.Second)
}

// stallClient is client with 300 ms timeouts, for tests that stall the
// server: a round trip to it fails at 300 ms.
func stallClient(tb testing.TB, s *redistest.Server) *redis.Client {
	return newClient(tb, s, 300*time.Millisecond)
}

func newClient(tb testing.TB, s *redistest.Server, timeout time.Duration) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// withManual starts a hybrid limiter with no flusher and no prober: the
// test runs them with flushNow and probeNow, so nothing happens between two
// of its steps.
func withManual() Option { return func(o *options) error { o.manual = true; return nil } }

func (l *Limiter) flushNow()      { l.hyb.flush(time.Now()) }
func (l *Limiter) probeNow() bool { return l.hyb.br.probeOnce() }

// storedUnits sums the counters Redis holds for the given user keys.
func storedUnits(tb testing.TB, c redis.UniversalClient, l *Limiter, keys ...string) int64 {
	tb.Helper()
	var total int64
	for i := 0; i < len(keys); i += 1000 {
		pipe := c.Pipeline()
		var cmds []*redis.StringCmd
		for _, k := range keys[i:min(i+1000, len(keys))] {
			cmds = append(cmds, pipe.Get(context.Background(), l.Key(k)))
		}
		if _, err := pipe.Exec(context.Background()); err != nil && err != redis.Nil {
			tb.Fatal(err)
		}
		for _, cmd := range cmds {
			if cmd.Err() == redis.Nil {
				continue
			}
			_, counts := decodeState(tb, cmd.Val(), l.span)
			for _, n := range counts {
				total += n
			}
		}
	}
	return total
}

// decodeState reads a key's packed state (see luaSource): the newest
// epoch l, and the ring of counts of epochs l−span … l, checking that the
// header's mid agrees with the ring.
func decodeState(tb testing.TB, raw string, span int) (newest int64, counts []int64) {
	tb.Helper()
	if len(raw) != 8*(span+3) {
		tb.Fatalf("state of %d bytes, want %d", len(raw), 8*(span+3))
	}
	vals := make([]int64, span+3)
	for i := range vals {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[8*i : 8*i+8])))
		if f != math.Trunc(f) || f < 0 || f >= 1<<53 {
			tb.Fatalf("state value %v is not an exact non-negative integer", f)
		}
		vals[i] = int64(f)
	}
	counts = vals[2:]
	var mid int64
	for k := 1; k < span; k++ {
		mid += counts[k]
	}
	if mid != vals[1] {
		tb.Fatalf("state: mid %d, but the ring between its ends sums to %d", vals[1], mid)
	}
	return vals[0], counts
}

// staleDeadline is a context whose deadline has passed but whose timer has
// not fired yet: Err() is still nil, as it is for a real context for a
// short while after its deadline.
type staleDeadline struct{ context.Context }

func (staleDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (staleDeadline) Err() error                  { return nil }

var ctx = context.Background()

func mustNew(t *testing.T, c redis.UniversalClient, cfg engine.Config, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// hookCounter is an OnError hook that counts its calls.
type hookCounter struct{ n atomic.Int64 }

func (h *hookCounter) opt() Option { return WithOnError(func(error) { h.n.Add(1) }) }

// hookLog keeps every error passed to the OnError hook.
type hookLog struct {
	mu   sync.Mutex
	errs []error
}

func (h *hookLog) opt() Option {
	return WithOnError(func(err error) {
		h.mu.Lock()
		h.errs = append(h.errs, err)
		h.mu.Unlock()
	})
}

// count returns how many errors wrap target.
func (h *hookLog) count(target error) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.errs {
		if errors.Is(e, target) {
			n++
		}
	}
	return n
}

func (h *hookLog) all() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// deadClient is a client pointing at a loopback port nothing listens on.
func deadClient(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func canceled() context.Context { // a context done before the call
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	return cx
}

// proxy is a loopback TCP proxy in front of a test's redis-server that can
// add latency to replies and cut connections, to reproduce what a slow or
// flaky network does to a client.
type proxy struct {
	ln     net.Listener
	target string
	// delay is added before each chunk of replies is forwarded (ns).
	delay atomic.Int64
	// cut, while positive, makes the next chunk of replies that starts
	// with an array ('*': a script's reply, not a handshake's) be dropped
	// and both connections closed: the server ran the commands, the
	// client sees EOF. Each cut decrements it.
	cut atomic.Int64
	// cuts counts the chunks dropped so far.
	cuts atomic.Int64
	// hole, while set, holds every byte in both directions until it is
	// closed: a path that drops packets, whose data TCP delivers once it
	// heals (see blackhole).
	hole atomic.Pointer[chan struct{}]

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: []net.Conn{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false // closed
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c) || !p.track(s) {
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.pass()
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if buf[0] == '*' && p.cut.Load() > 0 && p.cut.Add(-1) >= 0 {
						p.cuts.Add(1)
						return
					}
					if d := p.delay.Load(); d > 0 {
						time.Sleep(time.Duration(d)) // simulated latency
					}
					p.pass()
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// blackhole holds every byte on the path, in both directions, until the
// function it returns is called (also by close): the client's round trips
// and dials get no answer, as on a path that drops packets.
func (p *proxy) blackhole() (heal func()) {
	ch := make(chan struct{})
	h := &ch
	p.hole.Store(h)
	return func() {
		if p.hole.CompareAndSwap(h, nil) {
			close(ch)
		}
	}
}

// pass waits while the path is a blackhole.
func (p *proxy) pass() {
	if h := p.hole.Load(); h != nil {
		<-*h
	}
}

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *proxy) close() {
	if h := p.hole.Swap(nil); h != nil {
		close(*h)
	}
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// engineRef is the one reference of every decision test: an engine with
// cfg (never reclaiming a key), which the test drives with AllowAt at the
// Redis time the script used. It is closed when the test ends.
func engineRef(tb testing.TB, cfg engine.Config) *engine.Engine {
	tb.Helper()
	cfg.DisableEviction = true
	e, err := engine.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}

// roundTrips is a go-redis hook that records the longest command or
// pipeline its client ran, for the logs of tests on slow servers.
type roundTrips struct {
	longest       atomic.Int64 // ns
	started, done atomic.Int64 // round trips begun, and come back
}

func watchRoundTrips(c redis.UniversalClient) *roundTrips {
	w := &roundTrips{}
	c.AddHook(w)
	return w
}

func (w *roundTrips) note(t0 time.Time) {
	w.done.Add(1)
	d := int64(time.Since(t0))
	for o := w.longest.Load(); d > o && !w.longest.CompareAndSwap(o, d); o = w.longest.Load() {
	}
}

func (w *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.started.Add(1)
		defer w.note(time.Now())
		return next(ctx, cmd)
	}
}

func (w *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		w.started.Add(1)
		defer w.note(time.Now())
		return next(ctx, cmds)
	}
}

// wantClosed fails tb if the breaker opened (opens) or answered a decision
// (answers) on a server that answers every round trip, however slowly and
// however slow this machine: only a confirmed silence of confirmBudget of
// the process's own time opens it (liveness.go).
func (w *roundTrips) wantClosed(tb testing.TB, opens uint64, answers int64, why string) {
	tb.Helper()
	if opens != 0 || answers != 0 {
		tb.Errorf("the breaker opened %d times (%d answers by it), the longest round trip %v: %s", opens, answers, w, why)
	}
}

// String is the longest round trip, for logs.
func (w *roundTrips) String() string { return time.Duration(w.longest.Load()).String() }

// hangBound is how long a test waits for something that a correct limiter
// does within milliseconds: a bound on a hang, never a verdict on speed.
const hangBound = 20 * time.Second

// waitUntil polls cond every millisecond and fails tb if it does not hold
// within hangBound; the failure names what it waited for and state().
func waitUntil(tb testing.TB, what string, cond func() bool, state func() any) {
	tb.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > hangBound {
			tb.Fatalf("no %s within %v: %+v", what, hangBound, state())
		}
	}
}

// stall stops s (SIGSTOP) and returns the function that resumes it,
// which also runs when the test ends if the test has not called it.
func stall(tb testing.TB, s *redistest.Server) (resume func()) {
	tb.Helper()
	s.Signal(syscall.SIGSTOP)
	var once sync.Once
	resume = func() { once.Do(func() { s.Signal(syscall.SIGCONT) }) }
	tb.Cleanup(resume)
	return resume
}

// mixedContext returns, at random, one of a caller's three kinds of
// context: none (Background), one cancelled within cancelWithin (as an
// HTTP request whose client leaves), or a deadline of minDeadline plus up
// to spread. cancel releases it.
func mixedContext(r *rand.Rand, cancelWithin, minDeadline, spread time.Duration) (ctx context.Context, cancel func()) {
	switch r.IntN(3) {
	case 1:
		ctx, cf := context.WithCancel(context.Background())
		tm := time.AfterFunc(time.Duration(r.Int64N(int64(cancelWithin))), cf)
		return ctx, func() { tm.Stop(); cf() }
	case 2:
		return context.WithTimeout(context.Background(), minDeadline+time.Duration(r.Int64N(int64(spread))))
	}
	return context.Background(), func() {}
}

// long selects the long forms of the randomized and load tests: more
// keys, cases and seeds. The default is the short form that
// `go test ./...` and `make test` run; CI's long run sets it:
//
//	go test -race -run TestHybrid ./ -long
//	REDISSTORE_LONG=1 go test -race ./...
var long = flag.Bool("long", os.Getenv("REDISSTORE_LONG") != "", "run the long forms of the randomized and load tests (also REDISSTORE_LONG=1)")
