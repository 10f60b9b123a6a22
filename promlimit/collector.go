// Package promlimit exposes ringlimit's counters through the Prometheus
// client library: a prometheus.Collector that a service registers in the
// registry it already has.
package promlimit

import (
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// A Source is one limiter, middleware or interceptor whose counters a
// Collector reads: build one with Engine, HTTP, GRPC, GRPCClient or
// Backend, Audit. A Source given a bad argument holds the error, and New returns
// it.
type Source struct {
	kind    *kind
	limiter string
	read    func() []float64 // one value per series of the kind, in order
	err     error
}

// Outcomes is the shape of the per-decision counters of
// grpclimit.Interceptor.Stats (and of httplimit.Stats): GRPC accepts any
// type of this shape, so promlimit need not import grpclimit (and gRPC).
type Outcomes interface{ ~outcomes }

// outcomes and clientOutcomes spell the shapes once; a type parameter's
// fields are read through a conversion to them.
type outcomes = adapter.Counts

type clientOutcomes = struct {
	Admitted uint64
	Delayed  uint64
	Refused  uint64
	Canceled uint64
	Errors   uint64
	Waited   time.Duration
}

// ClientOutcomes is the shape of grpclimit.ClientStats.
type ClientOutcomes interface{ ~clientOutcomes }

// BackendStats are a shared limiter's failure counters. redisstore's
// Stats carry them under the same names; pass a function that copies
// them (see Backend).
type BackendStats struct {
	Failures          uint64 // calls to the backend that failed
	FallbackDecisions uint64 // decisions its failure policy made instead
	// CallerGone: calls not decided because the caller's context ended
	// first (a client that went away, a deadline that passed). They are
	// the caller's doing, not the backend's: not in Failures.
	CallerGone uint64
}

// A kind is the metric families of one kind of Source, with the order of
// the values its read function returns.
type kind struct {
	name     string // the Source constructor, for errors
	families []family
	series   []series
}

type family struct {
	name, help string
	typ        prometheus.ValueType
	outcome    bool // has the outcome label
}

type series struct {
	family  int
	outcome string
}

// The metric families. The names of Engine's and HTTP's are those of
// httplimit.MetricsHandler, the zero-dependency fallback, so a service can
// move from one to the other and keep its queries.
var (
	kindEngine = &kind{name: "Engine", families: []family{
		{"ringlimit_keys", "Keys held by the engine.", prometheus.GaugeValue, false},
		{"ringlimit_keys_evicted_total", "Keys reclaimed after being idle.", prometheus.CounterValue, false},
		{"ringlimit_keys_refused_total", "New keys refused because MaxKeys keys were held.", prometheus.CounterValue, false},
	}, series: []series{{0, ""}, {1, ""}, {2, ""}}}
	kindHTTP = &kind{name: "HTTP", families: []family{
		{"ringlimit_requests_total", "Requests seen by the rate-limit middleware, by outcome.", prometheus.CounterValue, true},
	}, series: outcomeSeries("allowed", "denied", "rejected", "error", "canceled", "would_deny")}
	kindGRPC = &kind{name: "GRPC", families: []family{
		{"ringlimit_grpc_decisions_total", "Decisions of the gRPC interceptor (one per unary call, per stream, or per message with WithPerMessage), by outcome.", prometheus.CounterValue, true},
	}, series: outcomeSeries("allowed", "denied", "rejected", "error", "canceled", "would_deny")}
	kindClient = &kind{name: "GRPCClient", families: []family{
		{"ringlimit_grpc_client_calls_total", "Outgoing gRPC calls paced by the client interceptor, by how they ended.", prometheus.CounterValue, true},
		{"ringlimit_grpc_client_wait_seconds_total", "Time outgoing gRPC calls spent waiting for the limiter.", prometheus.CounterValue, false},
	}, series: append(outcomeSeries("admitted", "delayed", "refused", "canceled", "error"), series{1, ""})}
	kindBackend = &kind{name: "Backend", families: []family{
		{"ringlimit_backend_failures_total", "Calls to the shared limiter's backend (Redis) that failed.", prometheus.CounterValue, false},
		{"ringlimit_backend_fallback_decisions_total", "Decisions made by the failure policy because the backend failed.", prometheus.CounterValue, false},
		{"ringlimit_backend_caller_gone_total", "Calls to the shared limiter answered with nothing admitted because the caller's context ended first (a client that went away, a deadline that passed): the caller's doing, not backend failures.", prometheus.CounterValue, false},
	}, series: []series{{0, ""}, {1, ""}, {2, ""}}}
	kindAudit = &kind{name: "Audit", families: []family{
		{"ringlimit_audit_decisions_total", "Decisions of sampled keys shadowed by the engine's self-audit (Config.Audit), by outcome.", prometheus.CounterValue, true},
		{"ringlimit_audit_false_decisions_total", "Shadowed decisions the exact log disagrees with: outcome allowed is a false admit (the units the engine admitted in the window plus n exceed the limit), denied a false deny.", prometheus.CounterValue, true},
		{"ringlimit_audit_unjudged_total", "Shadowed decisions not judged, because units of their window may be missing from the log (a dropped decision, or a key cap).", prometheus.CounterValue, false},
		{"ringlimit_audit_worst_window_ratio", "The most units the engine admitted in one window for a sampled key, over its limit, since the engine started.", prometheus.GaugeValue, false},
		{"ringlimit_audit_keys", "Sampled keys with an exact log now.", prometheus.GaugeValue, false},
		{"ringlimit_audit_skipped_total", "Decisions of sampled keys not shadowed because AuditMaxKeys or AuditMaxEntries was reached.", prometheus.CounterValue, false},
		{"ringlimit_audit_dropped_total", "Decisions of sampled keys that found the audit buffer full.", prometheus.CounterValue, false},
	}, series: []series{{0, "allowed"}, {0, "denied"}, {1, "allowed"}, {1, "denied"}, {2, ""}, {3, ""}, {4, ""}, {5, ""}, {6, ""}}}
	kinds = []*kind{kindEngine, kindHTTP, kindGRPC, kindClient, kindBackend, kindAudit}
)

func outcomeSeries(outcomes ...string) []series {
	s := make([]series, len(outcomes))
	for i, o := range outcomes {
		s[i] = series{0, o}
	}
	return s
}

func isNil(v any) bool {
	r := reflect.ValueOf(v)
	return !r.IsValid() || (r.Kind() == reflect.Pointer || r.Kind() == reflect.Func) && r.IsNil()
}

func newSource(k *kind, limiter string, src any, read func() []float64) Source {
	if isNil(src) {
		return Source{err: fmt.Errorf("promlimit: %s(%q, nil)", k.name, limiter)}
	}
	return Source{kind: k, limiter: limiter, read: read}
}

// Engine reads an engine's key statistics (engine.Stats):
//
//	ringlimit_keys                   gauge
//	ringlimit_keys_evicted_total     counter
//	ringlimit_keys_refused_total     counter
//
// limiter names it in the limiter label (see New).
func Engine(limiter string, e interface{ Stats() engine.Stats }) Source {
	return newSource(kindEngine, limiter, e, func() []float64 {
		s := e.Stats()
		return []float64{float64(s.Keys), float64(s.Evicted), float64(s.Refused)}
	})
}

// HTTP reads an httplimit.Middleware's counters (httplimit.Stats):
//
//	ringlimit_requests_total{outcome="allowed|denied|rejected|error|canceled|would_deny"}  counter
func HTTP(limiter string, m interface{ Stats() httplimit.Stats }) Source {
	return newSource(kindHTTP, limiter, m, func() []float64 {
		s := m.Stats()
		return []float64{float64(s.Allowed), float64(s.Denied), float64(s.Rejected), float64(s.Errors), float64(s.Canceled), float64(s.WouldDeny)}
	})
}

// GRPC reads a grpclimit.Interceptor's counters:
//
//	ringlimit_grpc_decisions_total{outcome="allowed|denied|rejected|error|canceled|would_deny"}  counter
func GRPC[S Outcomes](limiter string, i interface{ Stats() S }) Source {
	return newSource(kindGRPC, limiter, i, func() []float64 {
		s := outcomes(i.Stats())
		return []float64{float64(s.Allowed), float64(s.Denied), float64(s.Rejected), float64(s.Errors), float64(s.Canceled), float64(s.WouldDeny)}
	})
}

// GRPCClient reads a grpclimit.Client's counters:
//
//	ringlimit_grpc_client_calls_total{outcome="admitted|delayed|refused|canceled|error"}  counter
//	ringlimit_grpc_client_wait_seconds_total                                             counter
func GRPCClient[S ClientOutcomes](limiter string, c interface{ Stats() S }) Source {
	return newSource(kindClient, limiter, c, func() []float64 {
		s := clientOutcomes(c.Stats())
		return []float64{float64(s.Admitted), float64(s.Delayed), float64(s.Refused), float64(s.Canceled), float64(s.Errors), s.Waited.Seconds()}
	})
}

// Backend reads a shared limiter's failure counters from f:
//
//	ringlimit_backend_failures_total             counter
//	ringlimit_backend_fallback_decisions_total   counter
//	ringlimit_backend_caller_gone_total          counter
//
// A caller that cancels or whose deadline passes before the backend
// answers is counted in ringlimit_backend_caller_gone_total and never in
// ringlimit_backend_failures_total, so that clients giving up on their own
// requests do not page anyone about the backend. For a
// *redisstore.Limiter rl:
//
//	promlimit.Backend("redis", func() promlimit.BackendStats {
//		s := rl.Stats()
//		return promlimit.BackendStats{Failures: s.Failures, FallbackDecisions: s.FallbackDecisions, CallerGone: s.CallerGone}
//	})
//
// promlimit takes a function rather than the limiter so that its module
// does not depend on redisstore's, and with it on the Redis client.
func Backend(limiter string, f func() BackendStats) Source {
	return newSource(kindBackend, limiter, f, func() []float64 {
		s := f()
		return []float64{float64(s.Failures), float64(s.FallbackDecisions), float64(s.CallerGone)}
	})
}

// Audit reads an engine's self-audit (engine.AuditReport, with
// Config.Audit set):
//
//	ringlimit_audit_decisions_total{outcome="allowed|denied"}        counter
//	ringlimit_audit_false_decisions_total{outcome="allowed|denied"}  counter
//	ringlimit_audit_unjudged_total                                  counter
//	ringlimit_audit_worst_window_ratio                              gauge
//	ringlimit_audit_keys                                            gauge
//	ringlimit_audit_skipped_total                                   counter
//	ringlimit_audit_dropped_total                                   counter
//
// A false allowed is a false admit, a false denied a false deny
// (engine.AuditReport). Each scrape calls Audit, which drains the audit's
// buffer. With Config.Audit 0 every series is 0.
func Audit(limiter string, e interface{ Audit() engine.AuditReport }) Source {
	return newSource(kindAudit, limiter, e, func() []float64 {
		r := e.Audit()
		return []float64{float64(r.Admits), float64(r.Denies), float64(r.FalseAdmits), float64(r.FalseDenies),
			float64(r.Unjudged), r.WorstWindow, float64(r.Keys), float64(r.Skipped), float64(r.Dropped)}
	})
}

// Collector is a prometheus.Collector over ringlimit's counters. Build it
// with New and register it in the service's registry. It is safe for
// concurrent use: each Collect reads every Source's counters once, in
// that Source's own way (see each Stats type for what a reader may see
// under load).
//
// Labels are bounded: a series has at most an outcome label (a fixed set
// per family) and a limiter label (one value per Source given to New). No
// label ever carries a key.
type Collector struct {
	sources []Source
	descs   map[*kind][]*prometheus.Desc
	named   map[*kind]bool
}

// New returns a Collector over sources.
//
// Each Source names its limiter. Where a kind of Source (Engine, HTTP,
// GRPC, GRPCClient, Backend, Audit) is given once, its name may be empty: its
// series then have no limiter label, and Engine's and HTTP's are exactly
// httplimit.MetricsHandler's. Where a kind is given several times, every
// one must have a distinct, non-empty name, which becomes the limiter
// label. Breaking that rule, a nil Source argument, or a name that is not
// UTF-8, is an error.
func New(sources ...Source) (*Collector, error) {
	c := &Collector{descs: map[*kind][]*prometheus.Desc{}, named: map[*kind]bool{}}
	var errs []error
	byKind := map[*kind][]string{}
	for _, s := range sources {
		if s.err != nil {
			errs = append(errs, s.err)
			continue
		}
		if s.kind == nil {
			errs = append(errs, errors.New("promlimit: New: the zero Source (build one with Engine, HTTP, GRPC, GRPCClient, Backend or Audit)"))
			continue
		}
		if !utf8.ValidString(s.limiter) {
			errs = append(errs, fmt.Errorf("promlimit: %s(%q, …): the name is not valid UTF-8", s.kind.name, s.limiter))
			continue
		}
		byKind[s.kind] = append(byKind[s.kind], s.limiter)
		c.sources = append(c.sources, s)
	}
	for _, k := range kinds {
		names := byKind[k]
		if len(names) == 0 {
			continue
		}
		if len(names) > 1 {
			seen := map[string]bool{}
			for _, n := range names {
				switch {
				case n == "":
					errs = append(errs, fmt.Errorf("promlimit: New: %d %s sources, and one has no name; name each, for the limiter label", len(names), k.name))
				case seen[n]:
					errs = append(errs, fmt.Errorf("promlimit: New: two %s sources named %q", k.name, n))
				}
				seen[n] = true
			}
		}
		named := len(names) > 1 || names[0] != ""
		c.named[k] = named
		for _, f := range k.families {
			var labels []string
			if named {
				labels = append(labels, "limiter")
			}
			if f.outcome {
				labels = append(labels, "outcome")
			}
			c.descs[k] = append(c.descs[k], prometheus.NewDesc(f.name, f.help, labels, nil))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe sends the descriptors of every family the Collector's sources
// have.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range kinds {
		for _, d := range c.descs[k] {
			ch <- d
		}
	}
}

// Collect reads every Source once and sends its series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sources {
		vals := s.read()
		descs := c.descs[s.kind]
		for i, sr := range s.kind.series {
			labels := make([]string, 0, 2)
			if c.named[s.kind] {
				labels = append(labels, s.limiter)
			}
			if sr.outcome != "" {
				labels = append(labels, sr.outcome)
			}
			ch <- prometheus.MustNewConstMetric(descs[sr.family], s.kind.families[sr.family].typ, vals[i], labels...)
		}
	}
}
