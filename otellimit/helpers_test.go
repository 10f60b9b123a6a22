package otellimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

var t0 = time.Unix(1_700_000_000, 0) // a multiple of 10 s: FixedWindow windows start here

// reader is a ManualReader and the MeterProvider over it, shut down when
// the test ends.
func reader(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return r, mp
}

// point is one collected data point: its instrument's metadata and value.
type point struct {
	unit, typ string // typ: "counter" (monotonic sum), "updown" (non-monotonic sum), "gauge"
	i         int64
	f         float64
}

// collect collects r once and returns its points by "name{attributes}",
// attributes as k=v sorted and comma-joined. It fails the test on a
// point outside ScopeName or of a type otellimit never makes.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Fatalf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				typ := "updown"
				if d.IsMonotonic {
					typ = "counter"
				}
				if d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: temporality %v, want cumulative", m.Name, d.Temporality)
				}
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = point{unit: m.Unit, typ: typ, i: p.Value}
				}
			case metricdata.Sum[float64]:
				typ := "updown"
				if d.IsMonotonic {
					typ = "counter"
				}
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = point{unit: m.Unit, typ: typ, f: p.Value}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrs(p.Attributes)] = point{unit: m.Unit, typ: "gauge", f: p.Value}
				}
			default:
				t.Fatalf("%s: data of type %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func attrs(s attribute.Set) string {
	if s.Len() == 0 {
		return ""
	}
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	sort.Strings(kv)
	return "{" + strings.Join(kv, ",") + "}"
}

// register is Register with the provider mp, failing the test on an error.
func register(t *testing.T, mp *sdkmetric.MeterProvider, sources ...Source) *Registration {
	t.Helper()
	reg, err := Register(sources, WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// engineAndMiddleware is an engine over cfg on a ManualClock at t0, and a
// Middleware over it; closed when the test ends.
func engineAndMiddleware(t *testing.T, cfg engine.Config) (*engine.Engine, *httplimit.Middleware) {
	t.Helper()
	cfg.Clock = engine.NewManualClock(t0)
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	m, err := httplimit.NewMiddleware(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, m
}

// serve sends one GET through h from remote and returns its status.
func serve(h http.Handler, remote string) int {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// grpcStats and clientStats have the shapes of grpclimit.Stats and
// grpclimit.ClientStats (otellimit does not import grpclimit).
type grpcStats adapter.Counts

type fakeGRPC struct{ s grpcStats }

func (f fakeGRPC) Stats() grpcStats { return f.s }

type clientStats struct {
	Admitted, Delayed, Refused, Canceled, Errors uint64
	Waited                                       time.Duration
}

type fakeClient struct{ s clientStats }

func (f fakeClient) Stats() clientStats { return f.s }

// countingAudit counts the calls of Audit, which drains the buffer.
type countingAudit struct {
	r     engine.AuditReport
	calls int
}

func (c *countingAudit) Audit() engine.AuditReport { c.calls++; return c.r }

type fakeEngine struct{ s engine.Stats }

func (f fakeEngine) Stats() engine.Stats { return f.s }

type fakeMiddleware struct{ s httplimit.Stats }

func (f fakeMiddleware) Stats() httplimit.Stats { return f.s }
