package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// TestDryRunRefusesNothing: under WithDryRun every request reaches the
// handler; each decision is made (admissions charged) and counted, a
// refusal as WouldDeny with the fields a 429 would carry and no
// Retry-After; a key error and a cost above the limit are served too. The
// metrics show would_deny.
func TestDryRunRefusesNothing(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2})
	m := mustMiddleware(t, e, WithDryRun(), WithPolicyName("shadow", 0), WithCost(func(r *http.Request) int64 {
		if r.Header.Get("X-Big") != "" {
			return 3
		}
		return 1
	}))
	var runs int
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
	for n, want := range []string{`"shadow";r=1;t=11`, `"shadow";r=0;t=11`, `"shadow";r=0;t=11`, `"shadow";r=0;t=11`} { // t0 starts a sub-window: its units count W + w
		w := do(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", n, w.Code)
		}
		wantHeader(t, w.Header(), "RateLimit", want)
		wantHeader(t, w.Header(), "Retry-After")
	}
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 0 {
		t.Fatalf("remaining %d: the admissions were not charged", got)
	}
	if w := do(h, "192.0.2.2:1", func(r *http.Request) { r.Header.Set("X-Big", "1") }); w.Code != http.StatusOK {
		t.Fatalf("a cost above the limit: %d", w.Code)
	}
	if runs != 5 {
		t.Fatalf("the handler ran %d times for 5 requests", runs)
	}
	if s := m.Stats(); s != (Stats{Allowed: 2, WouldDeny: 3}) {
		t.Fatalf("Stats %+v", s)
	}
	keyed := mustMiddleware(t, e, WithDryRun(), WithKey(KeyByHeader("X-Tenant", MissingReject)))
	if w := do(keyed.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusOK || keyed.Stats() != (Stats{Rejected: 1}) {
		t.Fatalf("a key error under WithDryRun: %d %+v", w.Code, keyed.Stats())
	}
	mh := httptest.NewRecorder()
	MetricsHandler(m, nil).ServeHTTP(mh, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(mh.Body.String(), `ringlimit_requests_total{outcome="would_deny"} 3`+"\n") {
		t.Fatalf("metrics:\n%s", mh.Body.String())
	}
}

// TestDryRunMulti: NewMulti with WithDryRun lets a refusal through with
// every policy's member, charging none of the engines for it.
func TestDryRunMulti(t *testing.T) {
	a, _ := newEngine(t, engine.Config{Limit: 5})
	b, _ := newEngine(t, engine.Config{Limit: 1})
	m, err := NewMulti([]Policy{{Name: "a", Limiter: a}, {Name: "b", Limiter: b}}, WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	do(h, "192.0.2.1:1", nil)
	w := do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusOK || a.AllowN("192.0.2.1", 0).Remaining != 4 {
		t.Fatalf("%d, a's remaining %d", w.Code, a.AllowN("192.0.2.1", 0).Remaining)
	}
	if msg := adaptertest.CheckMembers(w.Header().Values("RateLimit-Policy"), w.Header().Values("RateLimit"), []string{"a", "b"}, []int64{5, 1}, []int64{4, 0}); msg != "" {
		t.Error(msg)
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, WouldDeny: 1}) {
		t.Fatalf("Stats %+v", s)
	}
}

// TestDryRunStillRefusesAGoneCaller: WithDryRun does not turn a caller
// who left into a handler run.
func TestDryRunStillRefusesAGoneCaller(t *testing.T) {
	m := mustMiddleware(t, &adaptertest.FailOpenOnCancel{}, WithDryRun())
	var runs int
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
	for _, c := range adaptertest.DoneContexts() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(c.Ctx))
	}
	if runs != 0 || m.Stats() != (Stats{Canceled: uint64(len(adaptertest.DoneContexts()))}) {
		t.Fatalf("runs %d, Stats %+v", runs, m.Stats())
	}
}
