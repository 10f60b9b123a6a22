package otellimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/otellimit"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// An engine and its middleware, read by the MeterProvider the service
// already has (here with a ManualReader, to print what it collects).
func ExampleRegister() {
	e, err := engine.New(engine.Config{
		Limit: 1, Window: 10 * time.Second,
		Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0)), // a fixed instant, for the output below
	})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e)
	if err != nil {
		log.Fatal(err)
	}

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	reg, err := otellimit.Register([]otellimit.Source{otellimit.Engine("", e), otellimit.HTTP("", m)},
		otellimit.WithMeterProvider(provider))
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()

	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 { // one admitted, two limited
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if sum, ok := mt.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					outcome, _ := p.Attributes.Value(otellimit.AttrOutcome)
					if outcome.AsString() != "" && p.Value == 0 {
						continue // the outcomes at zero are left out of this listing
					}
					fmt.Printf("%s{%s} %d %s\n", mt.Name, outcome.AsString(), p.Value, mt.Unit)
				}
			}
		}
	}
	// Unordered output:
	// ringlimit.keys{} 1 {key}
	// ringlimit.keys.evicted{} 0 {key}
	// ringlimit.keys.refused{} 0 {key}
	// ringlimit.requests{allowed} 1 {request}
	// ringlimit.requests{denied} 2 {request}
}
