package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// TestStackedMiddlewaresAddListMembers: a per-IP limit outside a
// per-tenant one; each adds its member to both fields, over real requests.
func TestStackedMiddlewaresAddListMembers(t *testing.T) {
	outerE, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	innerE, _ := newEngine(t, engine.Config{Limit: 2, Window: time.Minute, Algorithm: engine.FixedWindow})
	outer := New(outerE, WithPolicyName("per-ip", 0))
	inner := New(innerE, WithPolicyName("tenant", 0), WithKey(KeyByHeader("X-Tenant", MissingReject)))
	srv := httptest.NewServer(outer(inner(okHandler)))
	defer srv.Close()
	hdr := map[string]string{"X-Tenant": "acme"}

	for i, want := range []struct {
		code int
		rl   []string
	}{
		// t0 is 20 s into its Unix-aligned minute: the tenant's fixed
		// window resets in 40 s, admitted or denied.
		{200, []string{`"per-ip";r=4;t=10`, `"tenant";r=1;t=40`}},
		{200, []string{`"per-ip";r=3;t=10`, `"tenant";r=0;t=40`}},
		{429, []string{`"per-ip";r=2;t=10`, `"tenant";r=0;t=40`}},
	} {
		resp, _ := get(t, srv.Client(), srv.URL, hdr)
		if resp.StatusCode != want.code {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want.code)
		}
		wantHeader(t, resp.Header, "RateLimit-Policy", `"per-ip";q=5;w=10`, `"tenant";q=2;w=60`)
		wantHeader(t, resp.Header, "RateLimit", want.rl...)
	}
	// The outer denial stops the chain: only its member.
	for range 2 {
		get(t, srv.Client(), srv.URL, hdr)
	}
	resp, _ := get(t, srv.Client(), srv.URL, hdr)
	if resp.StatusCode != 429 {
		t.Fatal(resp.StatusCode)
	}
	wantHeader(t, resp.Header, "RateLimit-Policy", `"per-ip";q=5;w=10`)
	wantHeader(t, resp.Header, "RateLimit", `"per-ip";r=0;t=10`)
}

// TestLegacyHeadersStacked: the legacy headers are not lists; they show
// the policy with the least remaining quota.
func TestLegacyHeadersStacked(t *testing.T) {
	outerE, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	innerE, _ := newEngine(t, engine.Config{Limit: 9, Window: time.Minute, Algorithm: engine.FixedWindow})
	both := HeadersDraft | HeadersLegacy
	h := New(outerE, WithPolicyName("per-ip", 0), WithHeaders(both))(New(innerE, WithPolicyName("wide", 0), WithHeaders(both))(okHandler))
	w := do(h, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "X-RateLimit-Limit", "5")
	wantHeader(t, w.Header(), "X-RateLimit-Remaining", "4")
	wantHeader(t, w.Header(), "X-RateLimit-Reset", "10")
	wantHeader(t, w.Header(), "RateLimit", `"per-ip";r=4;t=10`, `"wide";r=8;t=40`)

	h = New(outerE, WithHeaders(HeadersLegacy))(okHandler)
	w = do(h, "192.0.2.2:1", nil)
	wantHeader(t, w.Header(), "X-RateLimit-Remaining", "4")
	wantHeader(t, w.Header(), "RateLimit")
	wantHeader(t, w.Header(), "RateLimit-Policy")
}

// TestAdmittedTIsATrueBound: Limit 2, Window 3 s, 10 sub-windows of
// 300 ms. Admitted responses used to say t=3 while the next 429 said t=4;
// capacity can take Window + one sub-window to come back, so t=4 (3.3 s
// rounded up), and the engine agrees: 3 s after a burst the quota is not
// free yet, 4 s after it is.
func TestAdmittedTIsATrueBound(t *testing.T) {
	t1 := time.Unix(0, 300_000_000*5_666_666_667) // the start of a sub-window
	for _, c := range []struct {
		alg        engine.Algorithm
		admitted   string // t= on an admitted response
		deniedWait string // Retry-After of the 429 right after the burst
		after      string // t= on the admitted response once the quota is back
	}{
		{engine.SlidingWindow, "4", "4", "4"}, // Retry-After 3.15 s: weight ½ of the oldest sub-window
		{engine.SlidingWindowStrict, "4", "4", "4"},
		// t1 is 2.1 s into its Unix-aligned 3 s window: 0.9 s to its end,
		// and 1 s later 0.1 s into the next, 2.9 s to its end.
		{engine.FixedWindow, "1", "1", "3"},
		{engine.SlidingLog, "3", "3", "3"},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t1)
			e, err := engine.New(engine.Config{Limit: 2, Window: 3 * time.Second, Algorithm: c.alg, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			call := serveReal(t, New(e)(okHandler))
			resp := call()
			wantHeader(t, resp.Header, "RateLimit-Policy", `"default";q=2;w=3`)
			wantHeader(t, resp.Header, "RateLimit", `"default";r=1;t=`+c.admitted)
			call()
			resp = call()
			if resp.StatusCode != 429 {
				t.Fatalf("third: %d", resp.StatusCode)
			}
			wantHeader(t, resp.Header, "Retry-After", c.deniedWait)
			wantHeader(t, resp.Header, "RateLimit", `"default";r=0;t=`+c.deniedWait)
			if resp.Header.Get("Retry-After") > c.admitted {
				t.Fatalf("the denial waits longer than the admitted t= bound")
			}
			// After the bound, with no traffic in between, the whole quota
			// is back: this request leaves Limit − 1.
			tb, _ := strconv.Atoi(c.admitted)
			clk.Advance(time.Duration(tb) * time.Second)
			resp = call()
			wantHeader(t, resp.Header, "RateLimit", `"default";r=1;t=`+c.after)
		})
	}
	// The old bound, the window (3 s), was false for the sliding counters:
	// 3 s after a burst at the start of a sub-window the burst still counts.
	clk := engine.NewManualClock(t1)
	e, err := engine.New(engine.Config{Limit: 2, Window: 3 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.AllowN("k", 2)
	clk.Advance(3 * time.Second)
	if d := e.AllowN("k", 1); d.Remaining != 0 {
		t.Fatalf("3 s after a burst: %+v, want Remaining 0 (the quota is not yet free)", d)
	}
}

// TestSubSecondWindowHasNoW: 10 per 100 ms used to be advertised as
// q=10;w=1, a rate ten times lower than the real one. A window that is
// not a whole number of seconds has no w=; t= stays a true bound.
func TestSubSecondWindowHasNoW(t *testing.T) {
	for _, c := range []struct {
		window     time.Duration
		policy, rl string
	}{
		{100 * time.Millisecond, `"default";q=10`, `"default";r=9;t=1`},
		{1500 * time.Millisecond, `"default";q=10`, `"default";r=9;t=2`}, // 1.65 s bound
		{2 * time.Second, `"default";q=10;w=2`, `"default";r=9;t=3`},     // 2.2 s bound
	} {
		e, _ := newEngine(t, engine.Config{Limit: 10, Window: c.window})
		resp := serveReal(t, New(e)(okHandler))()
		wantHeader(t, resp.Header, "RateLimit-Policy", c.policy)
		wantHeader(t, resp.Header, "RateLimit", c.rl)
	}
}

// TestWindowComesFromTheLimiter: WithPolicyName's window is optional; given,
// it must agree with the limiter's (see the misconfiguration table).
func TestWindowComesFromTheLimiter(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Algorithm: engine.FixedWindow}) // 10 s
	for _, h := range []http.Handler{
		New(e)(okHandler),
		New(e, WithPolicyName("default", 0))(okHandler),
		New(e, WithPolicyName("default", 10*time.Second))(okHandler),
	} {
		resp := serveReal(t, h)()
		wantHeader(t, resp.Header, "RateLimit-Policy", `"default";q=5;w=10`)
	}
	// A name needing escapes.
	resp := serveReal(t, New(e, WithPolicyName(`a "b" \c`, 0))(okHandler))()
	wantHeader(t, resp.Header, "RateLimit-Policy", `"a \"b\" \\c";q=5;w=10`)
}

// TestHeadersBelow: with WithHeadersBelow(0.5) and Limit 4, admitted
// responses carry the fields only once r < 2; the 429 always does.
func TestHeadersBelow(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 4, Algorithm: engine.FixedWindow})
	call := serveReal(t, New(e, WithHeadersBelow(0.5), WithHeaders(HeadersDraft|HeadersLegacy))(okHandler))
	for i, want := range []string{"", "", `"default";r=1;t=10`, `"default";r=0;t=10`, `"default";r=0;t=10`} {
		resp := call()
		if want == "" {
			wantHeader(t, resp.Header, "RateLimit")
			wantHeader(t, resp.Header, "RateLimit-Policy")
			wantHeader(t, resp.Header, "X-RateLimit-Remaining")
			continue
		}
		wantHeader(t, resp.Header, "RateLimit", want)
		wantHeader(t, resp.Header, "RateLimit-Policy", `"default";q=4;w=10`)
		if i == 4 && resp.StatusCode != 429 {
			t.Fatalf("fifth: %d", resp.StatusCode)
		}
	}
}

// TestPolicyValueIsCached: RateLimit-Policy is built once per limit and
// the same string is reused; with per-tenant limits each limit has its own.
func TestPolicyValueIsCached(t *testing.T) {
	p, err := NewTiers(2, map[string]int64{"pro": 4})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := newEngine(t, engine.Config{KeyLimit: p.KeyLimit, Algorithm: engine.FixedWindow})
	h := New(e, WithKey(KeyByHeader("X-Tenant", MissingReject)))(okHandler)
	policy := func(tenant string) string {
		w := do(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Tenant", tenant) })
		return w.Header().Get("RateLimit-Policy")
	}
	a, b, c, d := policy("free"), policy("pro"), policy("free"), policy("pro")
	if a != `"default";q=2;w=10` || b != `"default";q=4;w=10` || c != a || d != b {
		t.Fatalf("%q %q %q %q", a, b, c, d)
	}
	if unsafe.StringData(a) != unsafe.StringData(c) || unsafe.StringData(b) != unsafe.StringData(d) {
		t.Fatal("RateLimit-Policy was rebuilt for a limit already seen")
	}
}

// TestPolicyCacheConcurrent races the policy cache across limits that
// share slots, under -race.
func TestPolicyCacheConcurrent(t *testing.T) {
	const policySlots = 8 // the size of the policy cache (internal/adapter)
	f := &adaptertest.Remote{Next: func(key string, _ int64) (engine.Decision, error) {
		l := int64(len(key)) * policySlots // limits 8, 16, 24, …: all in slot 0
		return engine.Decision{Allowed: true, Limit: l, Remaining: l - 1}, nil
	}}
	m := mustMiddleware(t, f, WithKey(KeyByHeader("K", MissingReject)), WithPolicyName("p", time.Second))
	h := m.Handler(okHandler)
	var wg sync.WaitGroup
	errc := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := strings.Repeat("k", g+1)
			want := `"p";q=` + strconv.Itoa((g+1)*policySlots) + ";w=1"
			for range 500 {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("K", key)
				h.ServeHTTP(w, r)
				if got := w.Header().Get("RateLimit-Policy"); got != want {
					errc <- got + " != " + want
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for e := range errc {
		t.Error(e)
	}
}

// TestFixedWindowAdmittedResetIsExact: an admitted response of a
// FixedWindow limiter says t= the exact time to the end of the
// Unix-aligned window (rounded up to whole seconds), not the whole window:
// before, it said t=3600 while the next 429 said t=2943. At each instant
// the reference is computed from the window arithmetic, and the denial
// that follows at the same instant must say the same.
func TestFixedWindowAdmittedResetIsExact(t *testing.T) {
	const window = time.Hour
	e, clk := newEngine(t, engine.Config{Algorithm: engine.FixedWindow, Window: window, Limit: 1})
	m := mustMiddleware(t, e, WithPolicyName("fixed", 0), WithHeaders(HeadersDraft|HeadersLegacy))
	h := m.Handler(okHandler)
	start := t0.Truncate(window).Add(window) // a window start
	for n, off := range []time.Duration{
		0,                                 // the window's first instant: all of it
		657 * time.Second,                 // 2943 s left (t=3600 before the fix)
		657*time.Second + time.Nanosecond, // rounded up
		window - time.Second,              // 1 s left
		window - time.Nanosecond,          // 1 ns left: t=1, never 0
	} {
		now := start.Add(time.Duration(n) * window).Add(off) // a fresh window per step
		clk.Set(now)
		left := now.Truncate(window).Add(window).Sub(now)
		want := strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
		w := do(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusOK {
			t.Fatalf("step %d: %d", n, w.Code)
		}
		wantHeader(t, w.Header(), "Ratelimit", `"fixed";r=0;t=`+want)
		wantHeader(t, w.Header(), "X-Ratelimit-Reset", want)
		w = do(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("step %d: second request %d", n, w.Code)
		}
		wantHeader(t, w.Header(), "Ratelimit", `"fixed";r=0;t=`+want)
	}
}
