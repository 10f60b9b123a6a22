package httplimit

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// TestMultiOverFailingLimiters: a shared limiter that fails follows its
// failure policy under NewMulti: a fail-open admission goes on to the
// handler (counted as an Error), a fail-closed refusal is 503 with
// Retry-After; a request whose context ended gets 503 and no handler,
// counted as Canceled.
func TestMultiOverFailingLimiters(t *testing.T) {
	down := errors.New("redis down")
	open := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Allowed: true, Limit: 3, Remaining: 3}, down
	})
	closed := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Limit: 3, RetryAfter: 2 * time.Second}, down
	})
	for _, c := range []struct {
		name  string
		l     any
		gone  bool
		code  int
		retry string
		stats Stats
	}{
		{"fail open", open, false, http.StatusOK, "", Stats{Errors: 1}},
		{"fail closed", closed, false, http.StatusServiceUnavailable, "2", Stats{Errors: 1}},
		{"caller gone", closed, true, http.StatusServiceUnavailable, "", Stats{Canceled: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, engine.Config{Limit: 5})
			m, err := NewMulti([]Policy{{Name: "local", Limiter: e}, {Name: "shared", Limiter: c.l}})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
			w := do(h, "192.0.2.1:1", func(r *http.Request) {
				if c.gone {
					ctx, cancel := context.WithCancel(r.Context())
					cancel()
					*r = *r.WithContext(ctx)
				}
			})
			if w.Code != c.code || w.Header().Get("Retry-After") != c.retry || ran != (c.code == http.StatusOK) {
				t.Errorf("%d Retry-After %q ran %v; want %d %q", w.Code, w.Header().Get("Retry-After"), ran, c.code, c.retry)
			}
			if s := m.Stats(); s != c.stats {
				t.Errorf("Stats %+v, want %+v", s, c.stats)
			}
		})
	}
}

// TestMultiStopsOnAKeyOrCostError: a policy's key that cannot be computed,
// or a negative cost, answers the request before any policy is charged.
func TestMultiStopsOnAKeyOrCostError(t *testing.T) {
	a, _ := newEngine(t, engine.Config{Limit: 5})
	b, _ := newEngine(t, engine.Config{Limit: 5})
	m, err := NewMulti([]Policy{{Name: "ip", Limiter: a}, {Name: "tenant", Limiter: b, Key: KeyByHeader("X-Tenant", MissingReject)}})
	if err != nil {
		t.Fatal(err)
	}
	if w := do(m.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusBadRequest {
		t.Errorf("no X-Tenant: %d, want 400", w.Code)
	}
	neg, err := NewMulti([]Policy{{Name: "ip", Limiter: a}}, WithCost(func(*http.Request) int64 { return -1 }))
	if err != nil {
		t.Fatal(err)
	}
	if w := do(neg.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusInternalServerError {
		t.Errorf("a negative cost: %d, want 500", w.Code)
	}
	if got := a.AllowN("192.0.2.1", 0).Remaining; got != 5 {
		t.Errorf("a refused request charged the ip policy: remaining %d, want 5", got)
	}
}

// TestDryRunCountsEveryRefusal: under WithDryRun a full MaxKeys table is a
// would-deny, a limit the limiter could not use and a negative cost are
// Rejected; every request reaches the handler. Without it, the unusable
// limit is a 500.
func TestDryRunCountsEveryRefusal(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, MaxKeys: 1})
	full := mustMiddleware(t, e, WithDryRun())
	for _, ip := range []string{"192.0.2.1:1", "192.0.2.2:1"} { // the second is a new key beyond MaxKeys
		if w := do(full.Handler(okHandler), ip, nil); w.Code != http.StatusOK {
			t.Fatalf("%s: %d", ip, w.Code)
		}
	}
	bad := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Limit: 5, RetryAfter: engine.Never}, nil
	})
	mis := mustMiddleware(t, bad, WithDryRun(), WithPolicyName("p", time.Second))
	if w := do(mis.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusOK {
		t.Fatalf("misconfigured under dry run: %d", w.Code)
	}
	neg := mustMiddleware(t, e, WithDryRun(), WithCost(func(*http.Request) int64 { return -1 }))
	if w := do(neg.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusOK {
		t.Fatalf("negative cost under dry run: %d", w.Code)
	}
	if full.Stats() != (Stats{Allowed: 1, WouldDeny: 1}) || mis.Stats() != (Stats{Rejected: 1}) || neg.Stats() != (Stats{Rejected: 1}) {
		t.Errorf("Stats: full %+v, misconfigured %+v, negative cost %+v", full.Stats(), mis.Stats(), neg.Stats())
	}
	strict := mustMiddleware(t, bad, WithPolicyName("p", time.Second))
	if w := do(strict.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusInternalServerError || strict.Stats() != (Stats{Rejected: 1}) {
		t.Errorf("misconfigured: %d %+v, want 500, Rejected", w.Code, strict.Stats())
	}
}

// TestKeyByRoutePassesTheInnerKeysError: a route key whose inner key
// cannot be computed refuses the request with the inner key's error.
func TestKeyByRoutePassesTheInnerKeysError(t *testing.T) {
	k := KeyByRoute(func(*http.Request) string { return "GET /x" }, KeyByHeader("X-Tenant", MissingReject))
	if err := keyErr(t, k, "192.0.2.1:1", nil); err == nil {
		t.Error("no error without the inner key's header")
	}
	if got := keyOf(t, k, "192.0.2.1:1", http.Header{"X-Tenant": {"acme"}}); got != "GET /x\x00acme" {
		t.Errorf("key %q", got)
	}
}

// TestPrefersJSONWildcards: application/* and text/* weigh as less
// specific than their full types, and more than */*.
func TestPrefersJSONWildcards(t *testing.T) {
	for _, c := range []struct {
		accept string
		want   bool
	}{
		{"application/*", true},
		{"text/*", false},
		{"application/*;q=0.4, text/*;q=0.5", false},
		{"application/*;q=0.6, text/*;q=0.5", true},
		{"application/json;q=0.1, application/*;q=0.9, text/plain;q=0.5", false}, // the specific q wins
		{"text/plain;q=0.1, text/*;q=0.9, application/json;q=0.5", true},
	} {
		if got := prefersJSON([]string{c.accept}); got != c.want {
			t.Errorf("prefersJSON(%q) = %v, want %v", c.accept, got, c.want)
		}
	}
}

// failingReserver is a ReservingLimiter that fails: open (Allowed with the
// error) or closed, or with the caller's context error when it is done.
type failingReserver struct {
	countingReserver
	open bool
}

func (l *failingReserver) ReserveN(ctx context.Context, key string, n int64) (engine.Decision, SettleFunc, error) {
	if ctx.Err() != nil {
		return engine.Decision{Allowed: l.open, Limit: 5}, nil, ctx.Err()
	}
	return engine.Decision{Allowed: l.open, Limit: 5, RetryAfter: time.Second}, nil, adaptertest.ErrBackend
}

// A later shared policy fails (fail-closed: 503; or the caller left: 503,
// Canceled; or fail-open: served) after an engine policy reserved its unit
// in flight. Refused requests "hold nothing of the others"; a served one
// gives its unit back when the handler returns.
func TestMultiSharedFailureAfterInFlight(t *testing.T) {
	for _, c := range []struct {
		name string
		open bool
		done bool
	}{{"fail closed", false, false}, {"fail open", true, false}, {"caller gone", true, true}, {"caller gone, closed", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			eng := limitEngine(t, 5, engine.SlidingWindowStrict)
			bad := &failingReserver{countingReserver: countingReserver{e: limitEngine(t, 5, engine.SlidingWindowStrict)}, open: c.open}
			m, err := NewMulti([]Policy{{Name: "engine", Limiter: eng, InFlight: true}, {Name: "shared", Limiter: bad, InFlight: true}})
			if err != nil {
				t.Fatal(err)
			}
			w, _ := doCatch(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", func(r *http.Request) {
				if c.done {
					ctx, cancel := context.WithCancel(r.Context())
					cancel()
					*r = *r.WithContext(ctx)
				}
			})
			t.Logf("status %d, stats %+v", w.Code, m.Stats())
			if got := remainingOf(eng, "192.0.2.1"); got != 5 {
				t.Fatalf("the engine policy keeps %d units in flight", 5-got)
			}
		})
	}
}
