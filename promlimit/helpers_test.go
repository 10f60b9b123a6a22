package promlimit

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

func must(s, _ string) string { return s }

// engineAndMiddleware is an engine over cfg and a Middleware over it with
// opts, closed when the test ends.
func engineAndMiddleware(t *testing.T, cfg engine.Config, opts ...httplimit.Option) (*engine.Engine, *httplimit.Middleware) {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	m, err := httplimit.NewMiddleware(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e, m
}
