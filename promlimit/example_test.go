package promlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/promlimit"
)

// Register ringlimit's counters in the registry the service already has,
// and serve it as usual.
func ExampleNew() {
	e, err := engine.New(engine.Config{Limit: 2, Window: 10 * time.Second, Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0))})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e)
	if err != nil {
		panic(err)
	}
	c, err := promlimit.New(promlimit.Engine("", e), promlimit.HTTP("", m))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	reg.MustRegister(c)

	api := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		api.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.SplitSeq(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "ringlimit_") {
			fmt.Println(line)
		}
	}
	// Output:
	// ringlimit_keys 1
	// ringlimit_keys_evicted_total 0
	// ringlimit_keys_refused_total 0
	// ringlimit_requests_total{outcome="allowed"} 2
	// ringlimit_requests_total{outcome="canceled"} 0
	// ringlimit_requests_total{outcome="denied"} 1
	// ringlimit_requests_total{outcome="error"} 0
	// ringlimit_requests_total{outcome="rejected"} 0
	// ringlimit_requests_total{outcome="would_deny"} 0
}
