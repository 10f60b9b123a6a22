package otellimit

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestHTTPAndEngineAfterRealDecisions: after real requests through a
// middleware over an engine, each collection reports exactly the Stats of
// that moment: counted by outcome, the keys held, and nothing that the
// decisions did not do.
func TestHTTPAndEngineAfterRealDecisions(t *testing.T) {
	e, m := engineAndMiddleware(t, engine.Config{Limit: 2, Window: 10 * time.Second, Algorithm: engine.FixedWindow, MaxKeys: 2})
	r, mp := reader(t)
	register(t, mp, Engine("", e), HTTP("", m))
	h := m.Handler(ok)

	// Before any request: every series is there, at zero.
	got := collect(t, r)
	for _, o := range []string{"allowed", "denied", "rejected", "error", "canceled", "would_deny"} {
		if p, found := got["ringlimit.requests{ringlimit.outcome="+o+"}"]; !found || p.i != 0 {
			t.Errorf("before any request, outcome %s: %+v (found %v), want 0", o, p, found)
		}
	}

	var statuses []int
	for range 5 {
		statuses = append(statuses, serve(h, "192.0.2.1:1")) // 2 admitted, 3 limited
	}
	statuses = append(statuses, serve(h, "192.0.2.2:1"))    // a second key, admitted
	statuses = append(statuses, serve(h, "192.0.2.3:1"))    // a third key: MaxKeys, 503
	statuses = append(statuses, serve(h, "not an address")) // a key error, 400
	want := []int{200, 200, 429, 429, 429, 200, 503, 400}
	for i := range want {
		if statuses[i] != want[i] {
			t.Fatalf("statuses %v, want %v", statuses, want)
		}
	}

	got = collect(t, r)
	s, es := m.Stats(), e.Stats()
	for name, w := range map[string]struct {
		v     uint64
		exact int64 // what the requests above make it, independently of Stats
	}{
		"ringlimit.requests{ringlimit.outcome=allowed}":    {s.Allowed, 3},
		"ringlimit.requests{ringlimit.outcome=denied}":     {s.Denied, 4}, // 3 × 429 and the 503 for MaxKeys
		"ringlimit.requests{ringlimit.outcome=rejected}":   {s.Rejected, 1},
		"ringlimit.requests{ringlimit.outcome=error}":      {s.Errors, 0},
		"ringlimit.requests{ringlimit.outcome=canceled}":   {s.Canceled, 0},
		"ringlimit.requests{ringlimit.outcome=would_deny}": {s.WouldDeny, 0},
		"ringlimit.keys":         {uint64(es.Keys), 2},
		"ringlimit.keys.evicted": {uint64(es.Evicted), 0},
		"ringlimit.keys.refused": {uint64(es.Refused), 1},
	} {
		p, found := got[name]
		switch {
		case !found:
			t.Errorf("%s: no data point", name)
		case p.i != int64(w.v) || p.i != w.exact:
			t.Errorf("%s = %d, Stats say %d, the requests made %d", name, p.i, w.v, w.exact)
		}
	}
	if len(got) != 9 {
		t.Errorf("%d data points, want 9: %v", len(got), got)
	}

	// Cumulative: the next collection reads the counters anew.
	serve(h, "192.0.2.1:1")
	if p := collect(t, r)["ringlimit.requests{ringlimit.outcome=denied}"]; p.i != 5 {
		t.Errorf("after one more 429: denied = %d, want 5", p.i)
	}
}

// TestInstruments: each instrument's name, unit and kind (monotonic
// counter, up-down counter, gauge), as docs/metrics.md lists them.
func TestInstruments(t *testing.T) {
	r, mp := reader(t)
	register(t, mp,
		Engine("", fakeEngine{}), HTTP("", fakeMiddleware{}), GRPC("", fakeGRPC{}), GRPCClient("", fakeClient{}),
		Backend("", func() BackendStats { return BackendStats{} }), Audit("", &countingAudit{}))
	want := map[string][2]string{ // name → unit, kind
		"ringlimit.keys":                       {"{key}", "updown"},
		"ringlimit.keys.evicted":               {"{key}", "counter"},
		"ringlimit.keys.refused":               {"{key}", "counter"},
		"ringlimit.requests":                   {"{request}", "counter"},
		"ringlimit.grpc.decisions":             {"{decision}", "counter"},
		"ringlimit.grpc.client.calls":          {"{call}", "counter"},
		"ringlimit.grpc.client.wait":           {"s", "counter"},
		"ringlimit.backend.failures":           {"{call}", "counter"},
		"ringlimit.backend.fallback_decisions": {"{decision}", "counter"},
		"ringlimit.backend.caller_gone":        {"{call}", "counter"},
		"ringlimit.audit.decisions":            {"{decision}", "counter"},
		"ringlimit.audit.false_decisions":      {"{decision}", "counter"},
		"ringlimit.audit.unjudged":             {"{decision}", "counter"},
		"ringlimit.audit.worst_window":         {"1", "gauge"},
		"ringlimit.audit.keys":                 {"{key}", "updown"},
		"ringlimit.audit.skipped":              {"{decision}", "counter"},
		"ringlimit.audit.dropped":              {"{decision}", "counter"},
	}
	seen := map[string]bool{}
	for k, p := range collect(t, r) {
		name, _, _ := strings.Cut(k, "{ringlimit.")
		w, found := want[name]
		if !found {
			t.Errorf("unexpected instrument %s", k)
			continue
		}
		seen[name] = true
		if p.unit != w[0] || p.typ != w[1] {
			t.Errorf("%s: unit %q, %s; want %q, %s", k, p.unit, p.typ, w[0], w[1])
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: missing", name)
		}
	}
}

// TestEveryKindReadsItsStats: each kind of Source observes its Stats'
// fields under the right names and outcomes, and a named Source carries
// its ringlimit.limiter attribute.
func TestEveryKindReadsItsStats(t *testing.T) {
	r, mp := reader(t)
	audit := &countingAudit{r: engine.AuditReport{Admits: 11, Denies: 12, FalseAdmits: 13, FalseDenies: 14, Unjudged: 15, WorstWindow: 1.25, Keys: 16, Skipped: 17, Dropped: 18}}
	register(t, mp,
		GRPC("api", fakeGRPC{grpcStats{Allowed: 1, Denied: 2, Rejected: 3, Errors: 4, Canceled: 5, WouldDeny: 6}}),
		GRPCClient("", fakeClient{clientStats{Admitted: 7, Delayed: 8, Refused: 9, Canceled: 10, Errors: 11, Waited: 1500 * time.Millisecond}}),
		Backend("redis", func() BackendStats { return BackendStats{Failures: 21, FallbackDecisions: 22, CallerGone: 23} }),
		Audit("", audit),
		HTTP("big", fakeMiddleware{httplimit.Stats{Allowed: math.MaxUint64}}),
	)
	got := collect(t, r)
	if audit.calls != 1 {
		t.Errorf("Audit called %d times in one collection, want 1 (it drains the buffer)", audit.calls)
	}
	ints := map[string]int64{
		"ringlimit.grpc.decisions{ringlimit.limiter=api,ringlimit.outcome=allowed}":    1,
		"ringlimit.grpc.decisions{ringlimit.limiter=api,ringlimit.outcome=denied}":     2,
		"ringlimit.grpc.decisions{ringlimit.limiter=api,ringlimit.outcome=rejected}":   3,
		"ringlimit.grpc.decisions{ringlimit.limiter=api,ringlimit.outcome=error}":      4,
		"ringlimit.grpc.decisions{ringlimit.limiter=api,ringlimit.outcome=canceled}":   5,
		"ringlimit.grpc.decisions{ringlimit.limiter=api,ringlimit.outcome=would_deny}": 6,
		"ringlimit.grpc.client.calls{ringlimit.outcome=admitted}":                      7,
		"ringlimit.grpc.client.calls{ringlimit.outcome=delayed}":                       8,
		"ringlimit.grpc.client.calls{ringlimit.outcome=refused}":                       9,
		"ringlimit.grpc.client.calls{ringlimit.outcome=canceled}":                      10,
		"ringlimit.grpc.client.calls{ringlimit.outcome=error}":                         11,
		"ringlimit.backend.failures{ringlimit.limiter=redis}":                          21,
		"ringlimit.backend.fallback_decisions{ringlimit.limiter=redis}":                22,
		"ringlimit.backend.caller_gone{ringlimit.limiter=redis}":                       23,
		"ringlimit.audit.decisions{ringlimit.outcome=allowed}":                         11,
		"ringlimit.audit.decisions{ringlimit.outcome=denied}":                          12,
		"ringlimit.audit.false_decisions{ringlimit.outcome=allowed}":                   13,
		"ringlimit.audit.false_decisions{ringlimit.outcome=denied}":                    14,
		"ringlimit.audit.unjudged":                                                     15,
		"ringlimit.audit.keys":                                                         16,
		"ringlimit.audit.skipped":                                                      17,
		"ringlimit.audit.dropped":                                                      18,
		// A count past int64 is observed as 2^62 (maxCount), never negative.
		"ringlimit.requests{ringlimit.limiter=big,ringlimit.outcome=allowed}": 1 << 62,
	}
	for k, v := range ints {
		if p, found := got[k]; !found || p.i != v {
			t.Errorf("%s = %+v (found %v), want %d", k, p, found, v)
		}
	}
	for k, v := range map[string]float64{
		"ringlimit.grpc.client.wait":   1.5,
		"ringlimit.audit.worst_window": 1.25,
	} {
		if p, found := got[k]; !found || p.f != v {
			t.Errorf("%s = %+v (found %v), want %v", k, p, found, v)
		}
	}
}

// TestAuditFromEngine: the Audit source reads a real engine's self-audit.
func TestAuditFromEngine(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 3, Window: time.Second, Audit: 1, Clock: engine.NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, mp := reader(t)
	register(t, mp, Audit("", e))
	for range 5 {
		e.Allow("k") // 3 admitted, 2 denied, every one shadowed (Audit: 1)
	}
	got := collect(t, r)
	if a, d := got["ringlimit.audit.decisions{ringlimit.outcome=allowed}"].i, got["ringlimit.audit.decisions{ringlimit.outcome=denied}"].i; a != 3 || d != 2 {
		t.Errorf("audit decisions: allowed %d, denied %d; want 3 and 2", a, d)
	}
	if k := got["ringlimit.audit.keys"].i; k != 1 {
		t.Errorf("audit keys %d, want 1", k)
	}
}

// TestUnregister: after Unregister no Source is read, and a collection
// reports nothing of it.
func TestUnregister(t *testing.T) {
	r, mp := reader(t)
	audit := &countingAudit{}
	reg := register(t, mp, Audit("", audit))
	collect(t, r)
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, r); len(got) != 0 || audit.calls != 1 {
		t.Errorf("after Unregister: %d points, Audit called %d times (want 0 and 1)", len(got), audit.calls)
	}
	if err := reg.Unregister(); err != nil {
		t.Errorf("a second Unregister: %v", err)
	}
}

// TestRegisterErrors: every mistake is an error naming it, and nothing is
// registered.
func TestRegisterErrors(t *testing.T) {
	_, mp := reader(t)
	var nilEngine *engine.Engine
	for _, c := range []struct {
		name    string
		sources []Source
		opts    []Option
		want    string
	}{
		{"no provider", []Source{HTTP("", fakeMiddleware{})}, nil, "no MeterProvider"},
		{"nil provider", []Source{HTTP("", fakeMiddleware{})}, []Option{WithMeterProvider(nil)}, "no MeterProvider"},
		{"nil source", []Source{Engine("e", nilEngine)}, []Option{WithMeterProvider(mp)}, `otellimit: Engine("e", nil)`},
		{"nil function", []Source{Backend("", nil)}, []Option{WithMeterProvider(mp)}, `otellimit: Backend("", nil)`},
		{"zero source", []Source{{}}, []Option{WithMeterProvider(mp)}, "the zero Source"},
		{"not UTF-8", []Source{HTTP("\xff", fakeMiddleware{})}, []Option{WithMeterProvider(mp)}, "not valid UTF-8"},
		{"same name twice", []Source{HTTP("a", fakeMiddleware{}), HTTP("a", fakeMiddleware{})}, []Option{WithMeterProvider(mp)}, `two HTTP sources named "a"`},
		{"unnamed twice", []Source{HTTP("", fakeMiddleware{}), HTTP("", fakeMiddleware{})}, []Option{WithMeterProvider(mp)}, `two HTTP sources named ""`},
	} {
		reg, err := Register(c.sources, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) || reg != nil {
			t.Errorf("%s: %v, %v; want an error containing %q", c.name, reg, err, c.want)
		}
	}
	// One source of each name per kind is fine, and so are two kinds
	// under one name.
	if _, err := Register([]Source{HTTP("a", fakeMiddleware{}), HTTP("", fakeMiddleware{}), Engine("a", fakeEngine{})}, WithMeterProvider(noop.NewMeterProvider())); err != nil {
		t.Error(err)
	}
}

// TestConcurrentCollect: collections race decisions (under -race) and
// each other; a counter never goes back between two collections of one
// reader, and the last collection matches the Stats once traffic stops.
func TestConcurrentCollect(t *testing.T) {
	e, m := engineAndMiddleware(t, engine.Config{Limit: 50, Window: 10 * time.Second})
	r, mp := reader(t)
	register(t, mp, Engine("", e), HTTP("", m))
	h := m.Handler(ok)
	var writers sync.WaitGroup
	for g := range 2 {
		writers.Go(func() {
			for range 200 {
				serve(h, "192.0.2."+strconv.Itoa(g+1)+":1")
			}
		})
	}
	stop := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		var last int64
		for {
			var rm metricdata.ResourceMetrics
			if err := r.Collect(context.Background(), &rm); err != nil {
				errs <- err
				return
			}
			var v int64
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					if sum, isSum := mt.Data.(metricdata.Sum[int64]); isSum && mt.Name == "ringlimit.requests" {
						for _, p := range sum.DataPoints {
							v += p.Value
						}
					}
				}
			}
			if v < last {
				errs <- fmt.Errorf("ringlimit.requests went back from %d to %d", last, v)
				return
			}
			last = v
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	writers.Wait()
	close(stop)
	for err := range errs {
		t.Error(err)
	}
	got, s := collect(t, r), m.Stats()
	if a, d := got["ringlimit.requests{ringlimit.outcome=allowed}"].i, got["ringlimit.requests{ringlimit.outcome=denied}"].i; a != int64(s.Allowed) || d != int64(s.Denied) || a != 100 || d != 300 {
		t.Errorf("after the traffic: allowed %d, denied %d; Stats %+v; want 100 and 300", a, d, s)
	}
}
