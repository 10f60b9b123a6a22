package redisstore

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Issue 12: a request that can never be admitted is answered without a
// round trip: a client whose server is down still gets the refusal, with a
// nil error, ReasonNever, and nothing counted as a failure.
func TestNeverIsLocal(t *testing.T) {
	c := deadClient(t)
	limits := map[string]int64{"small": 3, "bad": -1, "huge": engine.MaxLimit + 1}
	for _, hybrid := range []bool{false, true} {
		cfg := engine.Config{Limit: 10, Window: time.Second}
		var opts []Option
		if hybrid {
			opts = append(opts, WithHybrid(10*time.Millisecond, 5), withManual())
		} else {
			cfg.KeyLimit = func(k string) int64 { return limits[k] }
		}
		l := mustNew(t, c, cfg, opts...)
		type step struct {
			key   string
			n     int64
			limit int64
		}
		steps := []step{{"k", -1, 10}, {"k", 11, 10}, {"k", 1 << 62, 10}, {"k", math.MaxInt64, 10}, {"k", math.MaxInt64 - 1, 10}, {"k", math.MinInt64, 10}}
		if !hybrid {
			steps = append(steps, step{"small", 4, 3}, step{"small", math.MaxInt64, 3}, step{"bad", 1, -1}, step{"huge", 1, engine.MaxLimit + 1})
		}
		for _, s := range steps {
			d, err := l.AllowN(ctx, s.key, s.n)
			want := engine.Decision{Limit: s.limit, RetryAfter: engine.Never}
			if err != nil || d != want || d.Reason() != engine.ReasonNever {
				t.Errorf("hybrid=%v key %q n %d: %+v %v, want %+v and a nil error", hybrid, s.key, s.n, d, err, want)
			}
		}
		if st := l.Stats(); st != (Stats{}) {
			t.Errorf("hybrid=%v: a refusal made a round trip or was counted: %+v", hybrid, st)
		}
	}
}

// Per-key limits on Redis: KeyLimit is asked on every decision, so a
// change of httplimit.Tiers applies from the next decision, counts
// kept; 0 means Config.Limit; the Decision carries the key's own limit.
func TestKeyLimitTiers(t *testing.T) {
	s := redistest.Start(t)
	pol, err := httplimit.NewTiers(0, map[string]int64{"free": 3, "pro": 5})
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Limit: 2, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, KeyLimit: pol.KeyLimit}
	l := mustNew(t, client(t, s), cfg)
	admit := func(key string, want int) {
		t.Helper()
		got := 0
		for range want + 2 {
			d, err := l.AllowN(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if lim, _ := pol.Limit(httplimit.Tenant(key)); lim != 0 && d.Limit != lim || lim == 0 && d.Limit != cfg.Limit {
				t.Fatalf("key %q: Decision.Limit %d, want %d", key, d.Limit, lim)
			}
			if d.Allowed {
				got++
			}
		}
		if got != want {
			t.Fatalf("key %q admitted %d, want %d", key, got, want)
		}
	}
	admit("free\x00a", 3)
	admit("free\x00b", 3) // its own window, the tenant's limit
	admit("pro\x00a", 5)
	admit("other", 2) // not in the table: Config.Limit
	// The swap applies at the next decision; the counts stay.
	if err := pol.Swap(map[string]int64{"free": 4, "pro": 2}, nil); err != nil {
		t.Fatal(err)
	}
	admit("free\x00a", 1) // 3 used of 4
	admit("pro\x00a", 0)  // 5 used of 2
	d, err := l.AllowN(ctx, "pro\x00a", 0)
	if err != nil || !d.Allowed || d.Remaining != 0 || d.Limit != 2 {
		t.Fatalf("a peek over the lowered limit: %+v %v", d, err)
	}
	// A limit above the weighted algorithm's exactness bound is refused
	// per request, like a KeyLimit result the engine refuses.
	wcfg := engine.Config{Limit: 10, Window: time.Second, SubWindows: 1, KeyLimit: func(string) int64 { return 9_007_199 + 1 }}
	wl := mustNew(t, client(t, s), wcfg)
	if d, err := wl.AllowN(ctx, "k", 1); err != nil || d.Allowed || d.RetryAfter != engine.Never {
		t.Fatalf("a key limit above the exactness bound: %+v %v", d, err)
	}
}

// The httplimit middleware over a redisstore limiter with a Tiers
// table: each tenant gets its own limit in the RateLimit fields, and a
// Swap applies to the next request.
func TestMiddlewareTiers(t *testing.T) {
	s := redistest.Start(t)
	pol, err := httplimit.NewTiers(0, map[string]int64{"pro": 3})
	if err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, client(t, s), engine.Config{Limit: 1, Window: 10 * time.Second, Algorithm: engine.SlidingWindowStrict, KeyLimit: pol.KeyLimit})
	m, err := httplimit.NewMiddleware(l, httplimit.WithKey(httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)), httplimit.WithPolicyName("tenant", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	get := func(tenant string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
	}
	codes := func(tenant string, k int) string {
		var b strings.Builder
		for range k {
			code, pol := get(tenant)
			b.WriteString(http.StatusText(code)[:2])
			if code == 200 && !strings.Contains(pol, "q=") {
				t.Fatalf("no quota in %q", pol)
			}
		}
		return b.String()
	}
	if got := codes("pro", 4); got != "OKOKOKTo" {
		t.Fatalf("pro: %s", got)
	}
	if got := codes("free", 2); got != "OKTo" {
		t.Fatalf("free: %s", got)
	}
	if _, p := get("pro"); !strings.Contains(p, "q=3") {
		t.Fatalf("pro's policy field %q, want q=3", p)
	}
	if err := pol.Set("free", 2, nil); err != nil {
		t.Fatal(err)
	}
	if got := codes("free", 2); got != "OKTo" {
		t.Fatalf("free after Set(2): %s", got)
	}
}

// KeyLimit with the failure policies: FallbackLocal gives each key its
// share of its own limit; FailOpen and FailClosed report the key's limit.
// WithHybrid with KeyLimit (refused at New before issue 32) reports the
// key's limit too.
func TestKeyLimitTiersAndHybrid(t *testing.T) {
	c := deadClient(t)
	kl := func(k string) int64 {
		if k == "big" {
			return 40
		}
		return 0
	}
	cfg := engine.Config{Limit: 8, Window: time.Minute, KeyLimit: kl}
	l := mustNew(t, c, cfg, WithFallbackLocal(0.5))
	for key, want := range map[string]int{"big": 20, "small": 4} {
		got := 0
		for range 50 {
			d, err := l.AllowN(ctx, key, 1)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%+v %v", d, err)
			}
			if d.Allowed {
				got++
			}
		}
		if got != want {
			t.Errorf("FallbackLocal(0.5), key %q: admitted %d, want %d", key, got, want)
		}
	}
	cl := mustNew(t, c, cfg)
	if d, err := cl.AllowN(ctx, "big", 1); !errors.Is(err, ErrUnavailable) || d.Allowed || d.Limit != 40 {
		t.Errorf("FailClosed: %+v %v", d, err)
	}
	hl := mustNew(t, c, cfg, WithHybrid(10*time.Millisecond, 2))
	if d, err := hl.AllowN(ctx, "big", 1); !errors.Is(err, ErrUnavailable) || d.Allowed || d.Limit != 40 {
		t.Errorf("WithHybrid with KeyLimit, FailClosed: %+v %v", d, err)
	}
}
