package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// silentDials is a test client's Dialer under which the dials of the
// limiter's checkers get no answer (a host that drops SYNs): they end only
// with their context, or, with connect, connect once it has ended (an
// answer that arrives as the dial is given up), or, with deaf (a Dialer
// that ignores its context, as go-redis's own with TLS), end with it
// unheeded. The client's own dials connect.
type silentDials struct {
	connect bool
	deaf    chan struct{} // if set, a dial ends when it is closed, not with its context
	nd      net.Dialer
	gone    chan struct{} // the test's end: a dial left running ends then
	in      atomic.Int64  // checkers' dials in the Dialer
	begun   atomic.Int64  // checkers' dials begun
	open    atomic.Int64  // connections made by checkers' dials, not closed
}

// suspect starts a confirmation on l, as a lost round trip does: its
// check dials the checker's connection.
func suspect(t *testing.T, l *Limiter) {
	t.Helper()
	if l.judge(ctx, "k", io.EOF) == nil {
		t.Fatal("a lost round trip started no confirmation")
	}
}

func newSilentDials(t testing.TB, connect bool) *silentDials {
	sd := &silentDials{connect: connect, gone: make(chan struct{})}
	t.Cleanup(func() { close(sd.gone) })
	return sd
}

// checkers reports whether the calling goroutine dials for a checker: a
// frame of redisstore's own code (not a test's) is on its stack, which is
// never so for the client's own dials, made in go-redis's goroutines.
func checkers() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/ringlimit/ringlimit/redisstore.") && !strings.HasSuffix(f.File, "_test.go") {
			return true
		}
		if !more {
			return false
		}
	}
}

func (sd *silentDials) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if !checkers() {
		return sd.nd.DialContext(ctx, network, addr)
	}
	sd.begun.Add(1)
	sd.in.Add(1)
	defer sd.in.Add(-1)
	done := ctx.Done()
	if sd.deaf != nil {
		done = sd.deaf
	}
	select {
	case <-done:
	case <-sd.gone:
		return nil, errors.New("the test is over")
	}
	if !sd.connect {
		return nil, errors.New("no answer")
	}
	cn, err := sd.nd.DialContext(context.Background(), network, addr)
	if err != nil {
		return nil, err
	}
	sd.open.Add(1)
	return &countedConn{Conn: cn, open: &sd.open}, nil
}

// countedConn decrements *open when it is first closed.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// checkerDials returns the goroutines (their "goroutine N" headers) in
// go-redis's dial whose stacks show a checker's dial, or, with among, those
// of among still in go-redis's dial (other tests' clients may dial too).
func checkerDials(among map[string]bool) map[string]bool {
	found := map[string]bool{}
	for _, g := range strings.Split(stacks(), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		if !strings.Contains(g, "pool.(*ConnPool).dialConn") {
			continue
		}
		if among != nil && among[id] || among == nil && (strings.Contains(g, "redisstore/checkdial.go") || strings.Contains(g, "redisstore/checkconn.go")) {
			found[id] = true
		}
	}
	return found
}

// closeWhileDialing waits until the checker of the node at addr dials, then
// closes l: when Close returns, no dial of the checker's is in progress,
// none began after it, and no connection a dial made is open. Close must
// not wait out the DialTimeout (a minute, past hangBound).
func closeWhileDialing(t *testing.T, l *Limiter, sd *silentDials, addr string) {
	t.Helper()
	var ck *checker
	waitUntil(t, "dial of the checker's connection", func() bool {
		if v, ok := l.checkers.Load(addr); ok {
			ck = v.(*checker)
		}
		return ck != nil && ck.dialing.Load() > 0 && sd.in.Load() > 0
	}, func() any { return fmt.Sprintf("checker %v, dials %d", ck != nil, sd.in.Load()) })
	dialing := checkerDials(nil) // go-redis's goroutines that dial for the checker (it retries in the same one)
	if len(dialing) == 0 {
		t.Fatalf("no goroutine of go-redis's found dialing for the checker:\n%s", stacks())
	}
	done := make(chan struct{})
	go func() { _ = l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangBound):
		t.Fatalf("Close did not return within %v: it waits out the dial's DialTimeout", hangBound)
	}
	if n, m := ck.dialing.Load(), sd.in.Load(); n != 0 || m != 0 {
		t.Fatalf("after Close, %d dial(s) of the checker's connection still in progress (%d in the client's Dialer)", n, m)
	}
	if n := sd.open.Load(); n != 0 {
		t.Fatalf("after Close, %d connection(s) made by the checker's dial still open", n)
	}
	begun := sd.begun.Load()
	for start := time.Now(); len(checkerDials(dialing)) > 0; time.Sleep(time.Millisecond) {
		if time.Since(start) > hangBound {
			t.Fatalf("go-redis still dials for the checker %v after Close:\n%s", hangBound, stacks())
		}
	}
	if n := sd.begun.Load() - begun; n != 0 {
		t.Fatalf("%d dial(s) of the checker's connection began after Close (go-redis's retries)", n)
	}
}

// Close while the dial of a checker's connection gets no answer: Close
// returns when every goroutine the Limiter started has ended, so no dial
// of the limiter's is in progress when it returns, none starts after it
// (go-redis's retries of the dial), and it does not wait out the
// DialTimeout. go-redis dials in a goroutine of its own, with a context
// detached from the check's, so cancelling the check left the dial
// running after Close. A dial that connects as Close comes leaves no
// connection open. The same in the hybrid mode.
func TestCloseEndsTheCheckersDial(t *testing.T) {
	for _, tc := range []struct {
		name    string
		connect bool
		opts    []Option
	}{
		{"plain", false, nil},
		{"plain, connects as Close comes", true, nil},
		{"hybrid", false, []Option{WithHybrid(5*time.Millisecond, 10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			sd := newSilentDials(t, tc.connect)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: sd.dial, DialTimeout: time.Minute, MaxRetries: -1})
			defer c.Close()
			l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, tc.opts...)
			if _, err := l.AllowN(ctx, "k", 1); err != nil { // the client's pool keeps its connection
				t.Fatal(err)
			}
			suspect(t, l) // a lost round trip: a suspicion, whose check dials the checker's connection
			closeWhileDialing(t, l, sd, "")
		})
	}
}

// A Dialer that ignores its context (go-redis's own with TLSConfig:
// tls.DialWithDialer) cannot be ended by Close: Close waits for it (at
// most DialTimeout with go-redis's), and no dial is left when it returns.
func TestCloseWaitsForADialerDeafToItsContext(t *testing.T) {
	s := redistest.Start(t)
	sd := newSilentDials(t, false)
	sd.deaf = make(chan struct{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: sd.dial, DialTimeout: time.Minute, MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute})
	suspect(t, l)
	waitUntil(t, "dial of the checker's connection", func() bool { return sd.in.Load() > 0 }, func() any { return sd.in.Load() })
	time.AfterFunc(50*time.Millisecond, func() { close(sd.deaf) }) // the dial's own timeout; a Close that does not wait returns before it
	_ = l.Close()
	if n := sd.in.Load(); n != 0 {
		t.Fatalf("Close returned while %d dial(s) of the checker's connection, deaf to their context, were in progress", n)
	}
}

// go-redis's own dialer with TLS ignores its context (tls.DialWithDialer):
// the checker dials with one that heeds it, so Close ends a handshake
// that gets no answer (a server that accepts and never speaks) rather
// than wait out the DialTimeout.
func TestCloseEndsTheCheckersTLSDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn // accepted, never answered
	var mu sync.Mutex
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, cn)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range held {
			cn.Close()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), TLSConfig: &tls.Config{InsecureSkipVerify: true},
		DialTimeout: time.Minute, MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute})
	suspect(t, l)
	var ck *checker
	waitUntil(t, "dial of the checker's connection", func() bool {
		if v, ok := l.checkers.Load(""); ok {
			ck = v.(*checker)
		}
		return ck != nil && ck.dialing.Load() > 0
	}, func() any { return ck != nil })
	done := make(chan struct{})
	go func() { _ = l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangBound):
		t.Fatalf("Close did not return within %v: it waits out the TLS dial's DialTimeout", hangBound)
	}
	if n := ck.dialing.Load(); n != 0 {
		t.Fatalf("after Close, %d dial(s) of the checker's connection still in progress", n)
	}
}

// heedfulDialer's dial is go-redis's own with TLS (a handshake with the
// node's TLSConfig), and a Dialer of the application's is kept as it is.
func TestHeedfulDialerDialsAsGoRedisDoes(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{InsecureSkipVerify: true}})
	defer c.Close()
	o := c.Options()
	d := heedfulDialer(o)
	if reflect.ValueOf(d).Pointer() == reflect.ValueOf(o.Dialer).Pointer() {
		t.Fatal("go-redis's own dialer with TLS was kept: it ignores its context")
	}
	cn, err := d(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	if tc, ok := cn.(*tls.Conn); !ok || !tc.ConnectionState().HandshakeComplete {
		t.Fatalf("the dial made %T, not a TLS connection with its handshake done", cn)
	}
	own := func(ctx context.Context, network, addr string) (net.Conn, error) { return nil, errors.New("own") }
	c2 := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{}, Dialer: own})
	defer c2.Close()
	if _, err := heedfulDialer(c2.Options())(ctx, "tcp", addr); err == nil || err.Error() != "own" {
		t.Fatalf("the application's Dialer was replaced: %v", err)
	}
}

// The same with a Cluster master's checker.
func TestCloseEndsAClusterCheckersDial(t *testing.T) {
	servers := redistest.StartCluster(t, 3)
	sd := newSilentDials(t, false)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(servers), Dialer: sd.dial, DialTimeout: time.Minute, MaxRetries: -1})
	defer cc.Close()
	l, err := New(cc, engine.Config{Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	addr, node := l.node(ctx, "k")
	if node == nil {
		t.Fatal("no master for k")
	}
	suspect(t, l)
	closeWhileDialing(t, l, sd, addr)
}

// Checks that keep beginning while Close runs (a confirmation's, a
// probe's): their dials too have ended when Close returns, and none
// begins after it.
func TestCloseEndsTheDialsOfChecksBegunAsItRuns(t *testing.T) {
	s := redistest.Start(t)
	sd := newSilentDials(t, false)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: sd.dial, DialTimeout: time.Minute, MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute})
	cctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for cctx.Err() == nil {
				_ = l.check(cctx, "", c, "k") // ends when its dial does, or at stop
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	closeWhileDialing(t, l, sd, "")
}
