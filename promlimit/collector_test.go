package promlimit

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

type fakeEngine struct{ s engine.Stats }

func (f fakeEngine) Stats() engine.Stats { return f.s }

type fakeAudit struct{ r engine.AuditReport }

func (f fakeAudit) Audit() engine.AuditReport { return f.r }

type fakeMiddleware struct{ s httplimit.Stats }

func (f fakeMiddleware) Stats() httplimit.Stats { return f.s }

// grpcStats and clientStats have the shapes of grpclimit.Stats and
// grpclimit.ClientStats (promlimit does not import grpclimit;
// examples/grpcserver passes the real ones).
type grpcStats adapter.Counts

type fakeGRPC struct{ s grpcStats }

func (f fakeGRPC) Stats() grpcStats { return f.s }

type clientStats struct {
	Admitted, Delayed, Refused, Canceled, Errors uint64
	Waited                                       time.Duration
}

type fakeClient struct{ s clientStats }

func (f fakeClient) Stats() clientStats { return f.s }

// scrape serves reg through promhttp, as a service exposes it, to a
// request without Accept (as curl sends), and returns the body and its
// Content-Type.
func scrape(t *testing.T, reg *prometheus.Registry) (string, string) {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("promhttp: %d %s", w.Code, w.Body)
	}
	return w.Body.String(), w.Header().Get("Content-Type")
}

func registry(t *testing.T, sources ...Source) *prometheus.Registry {
	t.Helper()
	c, err := New(sources...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return reg
}

// TestFallbackByteCompatible: httplimit's hand-written text (the
// zero-dependency fallback) is byte for byte what client_golang serves
// for the same values through this Collector, at the values where number
// formatting could differ (0, 1, the float switch to exponents at 1e6,
// values past 2^53 and the largest counter), and with either part left
// out.
func TestFallbackByteCompatible(t *testing.T) {
	for _, v := range []uint64{0, 1, 2, 999_999, 1_000_000, 1_234_567, 123_456_789_012, 1<<53 + 1, math.MaxInt64, math.MaxUint64} {
		ms := httplimit.Stats{Allowed: v, Denied: v / 2, Rejected: v / 3, Errors: v / 7, Canceled: v / 11, WouldDeny: v / 17}
		es := engine.Stats{Keys: int64(v / 5), Evicted: int64(v / 11), Refused: int64(v / 13)}
		for _, c := range []struct {
			name    string
			ms      *httplimit.Stats
			es      *engine.Stats
			sources []Source
		}{
			{"both", &ms, &es, []Source{HTTP("", fakeMiddleware{ms}), Engine("", fakeEngine{es})}},
			{"middleware", &ms, nil, []Source{HTTP("", fakeMiddleware{ms})}},
			{"engine", nil, &es, []Source{Engine("", fakeEngine{es})}},
		} {
			want, _ := scrape(t, registry(t, c.sources...))
			var mc *adapter.Counts // what httplimit.MetricsHandler writes for c.ms
			if c.ms != nil {
				v := adapter.Counts(*c.ms)
				mc = &v
			}
			got := string(adapter.AppendMetrics(nil, mc, c.es))
			if got != want {
				t.Errorf("%s at %d: the fallback differs from client_golang\nfallback:\n%s\nclient_golang:\n%s", c.name, v, got, want)
			}
		}
	}
}

// TestFallbackHandlerMatchesPromhttp: over HTTP, with a real engine and
// middleware after real traffic, httplimit.MetricsHandler and promhttp
// over New(Engine("", e), HTTP("", m)) serve the same body, and the
// same Content-Type.
func TestFallbackHandlerMatchesPromhttp(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 2, Window: 10 * time.Second, Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0)), MaxKeys: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, remote := range []string{"192.0.2.1:1", "192.0.2.1:1", "192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1", "192.0.2.4:1", "bad"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	mux := http.NewServeMux()
	mux.Handle("/fallback", httplimit.MetricsHandler(m, e))
	mux.Handle("/promhttp", promhttp.HandlerFor(registry(t, Engine("", e), HTTP("", m)), promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (string, string) {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header.Get("Content-Type")
	}
	fb, fct := get("/fallback")
	pb, pct := get("/promhttp")
	if fb != pb {
		t.Errorf("bodies differ\nfallback:\n%s\npromhttp:\n%s", fb, pb)
	}
	for _, want := range []string{`ringlimit_requests_total{outcome="allowed"} 4`, `ringlimit_requests_total{outcome="denied"} 2`, `ringlimit_requests_total{outcome="rejected"} 1`, "ringlimit_keys 3", "ringlimit_keys_refused_total 1"} {
		if !strings.Contains(fb, want+"\n") {
			t.Errorf("fallback lacks %q:\n%s", want, fb)
		}
	}
	if fct != pct || !strings.HasPrefix(fct, "text/plain; version=0.0.4;") {
		t.Errorf("Content-Type: fallback %q, promhttp %q", fct, pct)
	}
}

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
	e, err := engine.New(engine.Config{Limit: 5, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e, httplimit.WithKey(httplimit.KeyByHeader("X-Key", httplimit.MissingReject)))
	if err != nil {
		t.Fatal(err)
	}
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
	e, err := engine.New(engine.Config{Limit: 1000, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e)
	if err != nil {
		t.Fatal(err)
	}
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
		case <-time.After(10 * time.Second):
			t.Fatal("traffic goroutine did not stop")
		}
	}
	if !bytes.Contains([]byte(must(scrape(t, reg))), []byte("ringlimit_keys 1\n")) {
		t.Error("one client, one key")
	}
}

func must(s, _ string) string { return s }

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
