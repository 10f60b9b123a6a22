package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The pool logs every failed dial; the tests kill the server on purpose.
func init() { redistest.QuietClientLogs() }

func redisApp(t *testing.T, s *redistest.Server, l limits) *app {
	t.Helper()
	a, err := newRedisApp(context.Background(), newRedisClient(s.Addr()), "t:", l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.close() })
	return a
}

// TestTwoInstancesShareOneLimit: two instances of the example on one
// redis-server admit 5 requests per IP between them, not 5 each, and the
// headers count down across them.
func TestTwoInstancesShareOneLimit(t *testing.T) {
	s := redistest.Start(t)
	a, b := redisApp(t, s, testLimits), redisApp(t, s, testLimits)
	A, B := serve(t, a), serve(t, b)
	for i, c := range []caller{A, B, A, B, A} {
		code, hdr, body := c.call("GET", "/", "")
		if code != 200 || body != "hello\n" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
		wantValues(t, hdr, "RateLimit-Policy", `"default";q=5;w=10`)
		wantValues(t, hdr, "RateLimit", `"default";r=`+strconv.Itoa(4-i)+`;t=11`)
	}
	code, hdr, body := B.call("GET", "/", "")
	if code != 429 {
		t.Fatalf("6th request, on B: %d %q", code, body)
	}
	// Redis TIME decides where in its 1 s sub-window the burst fell: the
	// wait is 10.2 s from the sub-window's start, so 10 or 11 s.
	retry := hdr.Get("Retry-After")
	if retry != "10" && retry != "11" {
		t.Fatalf("Retry-After %q, want 10 or 11", retry)
	}
	wantValues(t, hdr, "RateLimit", `"default";r=0;t=`+retry)
	if body != "rate limited; retry after "+retry+" s\n" {
		t.Fatalf("body %q", body)
	}
	// Per tenant, the same: free is 2 between both instances.
	if got := A.admitted("/api/hello", "bob", 1) + B.admitted("/api/hello", "bob", 2); got != 2 {
		t.Fatalf("free tenant admitted %d across A and B, want 2", got)
	}
	if got := B.admitted("/api/hello", "acme", 3) + A.admitted("/api/hello", "acme", 3); got != 4 {
		t.Fatalf("pro tenant admitted %d across A and B, want 4", got)
	}
	if code, _, body := A.call("POST", "/admin/tier?tier=free&limit=3", ""); code != 501 {
		t.Fatalf("admin with -redis: %d %q", code, body)
	}
	if sa, sb := a.m.Stats(), b.m.Stats(); sa.Allowed+sb.Allowed != 11 || sa.Denied+sb.Denied != 4 || sa.Errors+sb.Errors != 0 {
		t.Fatalf("stats %+v %+v", sa, sb)
	}
}

// TestRedisLimiterDirectly: a *redisstore.Limiter goes into the
// middleware as it is, like an *engine.Engine, and its Config gives the
// middleware the window (w=) and the bound t= of admitted responses.
// Before redisstore had Config, both were missing.
func TestRedisLimiterDirectly(t *testing.T) {
	s := redistest.Start(t)
	rdb := newRedisClient(s.Addr())
	defer rdb.Close()
	l, err := redisstore.New(rdb, engine.Config{Limit: 2, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := httplimit.New(l, httplimit.WithPolicyName("shared", 10*time.Second))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	c := serve(t, &app{handler: h})
	for i, want := range []string{`"shared";r=1;t=11`, `"shared";r=0;t=11`} {
		code, hdr, _ := c.call("GET", "/", "")
		if code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
		wantValues(t, hdr, "RateLimit-Policy", `"shared";q=2;w=10`)
		wantValues(t, hdr, "RateLimit", want) // t=: W + one sub-window, the bound on the units held
	}
	if code, _, _ := c.call("GET", "/", ""); code != 429 {
		t.Fatalf("third: %d", code)
	}
}

// failureContract reports whether this checkout's redisstore returns a
// non-nil error with its failure policy's Decision when Redis does not
// answer (issue 15's contract, errors.Is(err, redisstore.ErrUnavailable)).
// Before that, AllowN answered such a failure with a nil error.
func failureContract(t *testing.T) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := newRedisClient(addr)
	defer rdb.Close()
	l, err := redisstore.New(rdb, engine.Config{Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := l.AllowN(context.Background(), "probe", 1)
	return err != nil && !d.Allowed
}

// TestRedisKilledMidLoad: clients keep calling two instances while the
// redis-server is killed and restarted. Every answer is 200, 429 or 503;
// after the kill, fail-closed answers 503 with Retry-After 1 (one
// sub-window) and no rate-limit fields, counted as errors; after the
// restart the instances serve again.
func TestRedisKilledMidLoad(t *testing.T) {
	if !failureContract(t) {
		t.Skip("this redisstore returns a nil error when Redis fails (the fail-closed denial then reads as a 429); the ErrUnavailable contract of issue 15 makes this test run")
	}
	s := redistest.Start(t)
	l := limits{PerIP: 1_000_000, Window: 10 * time.Second, Free: 2, Pro: 4}
	a, b := redisApp(t, s, l), redisApp(t, s, l)
	A, B := serve(t, a), serve(t, b)

	var mu sync.Mutex
	codes := map[int]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range []caller{A, B, A, B} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.c.Get(c.url + "/")
				if err != nil {
					continue
				}
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	waitFor(t, func() bool { return a.m.Stats().Allowed > 20 && b.m.Stats().Allowed > 20 })
	s.Kill()
	// The kill is complete (Wait returned): every call from now on fails.
	for _, c := range []caller{A, B} {
		code, hdr, body := c.call("GET", "/", "")
		if code != 503 || body != "rate limiter unavailable; retry after 1 s\n" {
			t.Fatalf("after the kill: %d %q", code, body)
		}
		wantValues(t, hdr, "Retry-After", "1")
		wantValues(t, hdr, "RateLimit")
		wantValues(t, hdr, "RateLimit-Policy")
	}
	waitFor(t, func() bool { return a.m.Stats().Errors > 10 && b.m.Stats().Errors > 10 })
	s.Start()
	waitFor(t, func() bool {
		code, _, _ := A.call("GET", "/", "")
		code2, _, _ := B.call("GET", "/", "")
		return code == 200 && code2 == 200
	})
	close(stop)
	wg.Wait()
	for code, n := range codes {
		if code != 200 && code != 429 && code != 503 {
			t.Errorf("%d responses with status %d", n, code)
		}
	}
	if codes[503] == 0 {
		t.Errorf("no 503 under load while Redis was down: %v", codes)
	}
	mh := httptestGet(t, A, "/metrics")
	if !strings.Contains(mh, `ringlimit_requests_total{outcome="error"} `) || strings.Contains(mh, `outcome="error"} 0`+"\n") {
		t.Errorf("metrics:\n%s", mh)
	}
}

// waitFor polls cond, at most 20 s, and fails the test if it never holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20 s")
		}
		time.Sleep(10 * time.Millisecond) // the load goroutines make the progress; this only polls it
	}
}

func httptestGet(t *testing.T, c caller, path string) string {
	t.Helper()
	_, _, body := c.call("GET", path, "")
	return body
}

func wantValues(t *testing.T, h http.Header, k string, want ...string) {
	t.Helper()
	got := h.Values(k)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
		t.Errorf("%s = %q, want %q", k, got, want)
	}
}

// The example checks at start-up that Redis can decide, with the
// limiter's Ping: a replica (left behind by a failover, say) answers PING
// but refuses the script's writes, and the example must not start on it.
// Before, it checked with PING and started, and every request then got
// 503.
func TestStartRefusesAReplica(t *testing.T) {
	_, replica := redistest.StartReplicaPair(t)
	a, err := newRedisApp(context.Background(), newRedisClient(replica.Addr()), "t:", testLimits)
	if err == nil {
		_ = a.close()
		t.Fatal("the example started on a replica")
	}
	if !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("start-up on a replica: %v, want READONLY named", err)
	}
}
