package promlimit

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

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
	e, m := engineAndMiddleware(t, engine.Config{Limit: 2, Window: 10 * time.Second, Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0)), MaxKeys: 3})
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
