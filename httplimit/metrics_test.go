package httplimit

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

func TestMetricsHandler(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1})
	m := mustMiddleware(t, e)
	h := m.Handler(okHandler)
	do(h, "192.0.2.1:1", nil)
	do(h, "192.0.2.1:1", nil)
	do(h, "bad", nil)
	srv := httptest.NewServer(MetricsHandler(m, e))
	defer srv.Close()
	resp, body := get(t, srv.Client(), srv.URL, nil)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{
		"# TYPE ringlimit_requests_total counter\n",
		`ringlimit_requests_total{outcome="allowed"} 1` + "\n",
		`ringlimit_requests_total{outcome="denied"} 1` + "\n",
		`ringlimit_requests_total{outcome="rejected"} 1` + "\n",
		`ringlimit_requests_total{outcome="error"} 0` + "\n",
		"# TYPE ringlimit_keys gauge\nringlimit_keys 1\n",
		"ringlimit_keys_evicted_total 0\n",
		"ringlimit_keys_refused_total 0\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}
