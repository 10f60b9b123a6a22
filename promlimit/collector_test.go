package promlimit

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// TestCollectorNamed: several sources of a kind carry a limiter label;
// every family is present with its type, and promlint finds nothing to
// say about the names.
func TestCollectorNamed(t *testing.T) {
	c, err := New(
		Engine("api", fakeEngine{engine.Stats{Keys: 7, Evicted: 3, Refused: 1}}),
		Engine("admin", fakeEngine{engine.Stats{Keys: 1}}),
		HTTP("api", fakeMiddleware{httplimit.Stats{Allowed: 10, Denied: 2}}),
		GRPC("rpc", fakeGRPC{grpcStats{Allowed: 5, Denied: 1, Rejected: 2, Errors: 3}}),
		GRPCClient("partner", fakeClient{clientStats{Admitted: 4, Delayed: 2, Refused: 1, Canceled: 1, Errors: 0, Waited: 1500 * time.Millisecond}}),
		Backend("redis", func() BackendStats { return BackendStats{Failures: 9, FallbackDecisions: 8, CallerGone: 11} }),
		Audit("api", fakeAudit{engine.AuditReport{Share: 0.001, Decisions: 30, Admits: 20, Denies: 10, FalseAdmits: 2, FalseDenies: 3,
			Judged: 29, Unjudged: 1, WorstWindow: 1.25, Keys: 4, Skipped: 6, Dropped: 7}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP ringlimit_audit_decisions_total Decisions of sampled keys shadowed by the engine's self-audit (Config.Audit), by outcome.
# TYPE ringlimit_audit_decisions_total counter
ringlimit_audit_decisions_total{limiter="api",outcome="allowed"} 20
ringlimit_audit_decisions_total{limiter="api",outcome="denied"} 10
# HELP ringlimit_audit_dropped_total Decisions of sampled keys that found the audit buffer full.
# TYPE ringlimit_audit_dropped_total counter
ringlimit_audit_dropped_total{limiter="api"} 7
# HELP ringlimit_audit_false_decisions_total Shadowed decisions the exact log disagrees with: outcome allowed is a false admit (the units the engine admitted in the window plus n exceed the limit), denied a false deny.
# TYPE ringlimit_audit_false_decisions_total counter
ringlimit_audit_false_decisions_total{limiter="api",outcome="allowed"} 2
ringlimit_audit_false_decisions_total{limiter="api",outcome="denied"} 3
# HELP ringlimit_audit_keys Sampled keys with an exact log now.
# TYPE ringlimit_audit_keys gauge
ringlimit_audit_keys{limiter="api"} 4
# HELP ringlimit_audit_skipped_total Decisions of sampled keys not shadowed because AuditMaxKeys or AuditMaxEntries was reached.
# TYPE ringlimit_audit_skipped_total counter
ringlimit_audit_skipped_total{limiter="api"} 6
# HELP ringlimit_audit_unjudged_total Shadowed decisions not judged, because units of their window may be missing from the log (a dropped decision, or a key cap).
# TYPE ringlimit_audit_unjudged_total counter
ringlimit_audit_unjudged_total{limiter="api"} 1
# HELP ringlimit_audit_worst_window_ratio The most units the engine admitted in one window for a sampled key, over its limit, since the engine started.
# TYPE ringlimit_audit_worst_window_ratio gauge
ringlimit_audit_worst_window_ratio{limiter="api"} 1.25
# HELP ringlimit_backend_caller_gone_total Calls to the shared limiter answered with nothing admitted because the caller's context ended first (a client that went away, a deadline that passed): the caller's doing, not backend failures.
# TYPE ringlimit_backend_caller_gone_total counter
ringlimit_backend_caller_gone_total{limiter="redis"} 11
# HELP ringlimit_backend_failures_total Calls to the shared limiter's backend (Redis) that failed.
# TYPE ringlimit_backend_failures_total counter
ringlimit_backend_failures_total{limiter="redis"} 9
# HELP ringlimit_backend_fallback_decisions_total Decisions made by the failure policy because the backend failed.
# TYPE ringlimit_backend_fallback_decisions_total counter
ringlimit_backend_fallback_decisions_total{limiter="redis"} 8
# HELP ringlimit_grpc_client_calls_total Outgoing gRPC calls paced by the client interceptor, by how they ended.
# TYPE ringlimit_grpc_client_calls_total counter
ringlimit_grpc_client_calls_total{limiter="partner",outcome="admitted"} 4
ringlimit_grpc_client_calls_total{limiter="partner",outcome="canceled"} 1
ringlimit_grpc_client_calls_total{limiter="partner",outcome="delayed"} 2
ringlimit_grpc_client_calls_total{limiter="partner",outcome="error"} 0
ringlimit_grpc_client_calls_total{limiter="partner",outcome="refused"} 1
# HELP ringlimit_grpc_client_wait_seconds_total Time outgoing gRPC calls spent waiting for the limiter.
# TYPE ringlimit_grpc_client_wait_seconds_total counter
ringlimit_grpc_client_wait_seconds_total{limiter="partner"} 1.5
# HELP ringlimit_grpc_decisions_total Decisions of the gRPC interceptor (one per unary call, per stream, or per message with WithPerMessage), by outcome.
# TYPE ringlimit_grpc_decisions_total counter
ringlimit_grpc_decisions_total{limiter="rpc",outcome="allowed"} 5
ringlimit_grpc_decisions_total{limiter="rpc",outcome="canceled"} 0
ringlimit_grpc_decisions_total{limiter="rpc",outcome="denied"} 1
ringlimit_grpc_decisions_total{limiter="rpc",outcome="error"} 3
ringlimit_grpc_decisions_total{limiter="rpc",outcome="rejected"} 2
ringlimit_grpc_decisions_total{limiter="rpc",outcome="would_deny"} 0
# HELP ringlimit_keys Keys held by the engine.
# TYPE ringlimit_keys gauge
ringlimit_keys{limiter="admin"} 1
ringlimit_keys{limiter="api"} 7
# HELP ringlimit_keys_evicted_total Keys reclaimed after being idle.
# TYPE ringlimit_keys_evicted_total counter
ringlimit_keys_evicted_total{limiter="admin"} 0
ringlimit_keys_evicted_total{limiter="api"} 3
# HELP ringlimit_keys_refused_total New keys refused because MaxKeys keys were held.
# TYPE ringlimit_keys_refused_total counter
ringlimit_keys_refused_total{limiter="admin"} 0
ringlimit_keys_refused_total{limiter="api"} 1
# HELP ringlimit_requests_total Requests seen by the rate-limit middleware, by outcome.
# TYPE ringlimit_requests_total counter
ringlimit_requests_total{limiter="api",outcome="allowed"} 10
ringlimit_requests_total{limiter="api",outcome="canceled"} 0
ringlimit_requests_total{limiter="api",outcome="denied"} 2
ringlimit_requests_total{limiter="api",outcome="error"} 0
ringlimit_requests_total{limiter="api",outcome="rejected"} 0
ringlimit_requests_total{limiter="api",outcome="would_deny"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// A registry accepts it next to the process collectors a service has.
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// TestCardinalityBounded: the number of series does not grow with the
// number of keys the engine holds.
func TestCardinalityBounded(t *testing.T) {
	e, m := engineAndMiddleware(t, engine.Config{Limit: 5, Window: time.Second}, httplimit.WithKey(httplimit.KeyByHeader("X-Key", httplimit.MissingReject)))
	c, err := New(Engine("", e), HTTP("", m))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for n := range 3 {
		for k := range 1000 {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Key", strings.Repeat("k", n+1)+string(rune('a'+k%26))+string(rune(k)))
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		if got := testutil.CollectAndCount(c); got != 9 {
			t.Fatalf("after %d000 keys: %d series, want 9", n+1, got)
		}
	}
	if e.Stats().Keys < 1000 {
		t.Fatalf("the engine holds %d keys", e.Stats().Keys)
	}
}

// TestNewErrors: a nil source, the zero Source, two sources of a kind
// without distinct names, and a name that is not UTF-8 are errors from
// New naming them; one source of each kind, or none, is not.
func TestNewErrors(t *testing.T) {
	var nilEngine *engine.Engine
	var nilMiddleware *httplimit.Middleware
	for _, c := range []struct {
		sources []Source
		want    string
	}{
		{[]Source{Engine("a", nilEngine)}, `promlimit: Engine("a", nil)`},
		{[]Source{HTTP("", nilMiddleware)}, `promlimit: HTTP("", nil)`},
		{[]Source{Backend("r", nil)}, `promlimit: Backend("r", nil)`},
		{[]Source{{}}, "the zero Source"},
		{[]Source{Engine("a", fakeEngine{}), Engine("", fakeEngine{})}, "2 Engine sources, and one has no name"},
		{[]Source{Engine("a", fakeEngine{}), Engine("a", fakeEngine{})}, `two Engine sources named "a"`},
		{[]Source{Engine("\xff", fakeEngine{})}, "not valid UTF-8"},
	} {
		_, err := New(c.sources...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
	// One of each kind, unnamed, is fine; so is no source at all.
	if _, err := New(Engine("", fakeEngine{}), HTTP("", fakeMiddleware{}), GRPC("", fakeGRPC{}), GRPCClient("", fakeClient{}), Backend("", func() BackendStats { return BackendStats{} })); err != nil {
		t.Error(err)
	}
	c, err := New()
	if err != nil || testutil.CollectAndCount(c) != 0 {
		t.Errorf("New(): %v", err)
	}
}

// TestConcurrentCollect: scrapes race with traffic and with each other
// (under -race), and the counters only grow.
func TestConcurrentCollect(t *testing.T) {
	e, m := engineAndMiddleware(t, engine.Config{Limit: 1000, Window: time.Second})
	reg := registry(t, Engine("", e), HTTP("", m))
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 2 {
		go func() {
			defer func() { errs <- nil }()
			for {
				select {
				case <-done:
					return
				default:
				}
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}
		}()
	}
	var last float64
	for range 50 {
		body, _ := scrape(t, reg)
		var v float64
		for _, line := range strings.Split(body, "\n") {
			if rest, ok := strings.CutPrefix(line, `ringlimit_requests_total{outcome="allowed"} `); ok {
				if _, err := fmt.Sscan(rest, &v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if v < last {
			t.Fatalf("allowed went from %v to %v", last, v)
		}
		last = v
	}
	close(done)
	for range 2 {
		select {
		case <-errs:
		case <-time.After(time.Minute): // a hang guard, not a verdict
			t.Fatal("traffic goroutine did not stop")
		}
	}
	if !bytes.Contains([]byte(must(scrape(t, reg))), []byte("ringlimit_keys 1\n")) {
		t.Error("one client, one key")
	}
}

// TestAuditFromEngine: the Audit source reads a real engine's self-audit.
func TestAuditFromEngine(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 10, Window: time.Second, SubWindows: 10, Audit: 1, DisableEviction: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t0 := time.Unix(1_700_000_000, 0)
	e.AllowAt("k", 10, t0.Add(99*time.Millisecond))
	e.AllowAt("k", 5, t0.Add(1050*time.Millisecond)) // a false admit: 15 in the window
	e.AllowAt("k", 1, t0.Add(1050*time.Millisecond)) // a right deny
	body, _ := scrape(t, registry(t, Audit("", e)))
	for _, want := range []string{
		`ringlimit_audit_decisions_total{outcome="allowed"} 2`,
		`ringlimit_audit_decisions_total{outcome="denied"} 1`,
		`ringlimit_audit_false_decisions_total{outcome="allowed"} 1`,
		`ringlimit_audit_false_decisions_total{outcome="denied"} 0`,
		`ringlimit_audit_worst_window_ratio 1.5`,
		`ringlimit_audit_keys 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	if _, err := New(Audit("", nil)); err == nil {
		t.Error("Audit with a nil engine: no error")
	}
}
