// Package otellimit exports ringlimit's counters as OpenTelemetry metrics:
// observable instruments, read from the engine's, the adapters' and the
// Redis limiter's Stats when the MeterProvider collects, so that a
// decision pays nothing for them. It depends on the OpenTelemetry metric
// API only; the application brings the SDK and its exporter.
//
//	reg, err := otellimit.Register([]otellimit.Source{
//		otellimit.Engine("", e), // ringlimit.keys, ringlimit.keys.evicted, ringlimit.keys.refused
//		otellimit.HTTP("", m),   // ringlimit.requests{ringlimit.outcome}
//	}, otellimit.WithMeterProvider(provider))
//	…
//	defer reg.Unregister()
//
// The instruments, their units and attributes, and how they map to
// promlimit's series and to ASP.NET Core's aspnetcore.rate_limiting.*
// conventions are in docs/metrics.md.
package otellimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the Meter the instruments
// come from: the package's import path, as OpenTelemetry recommends.
const ScopeName = "github.com/ringlimit/ringlimit/otellimit"

// The attributes. A series has at most these two, each from a bounded
// set: no attribute ever carries a key.
const (
	// AttrOutcome is how a decision, request or call ended: allowed,
	// denied, rejected, error, canceled or would_deny (and the client's
	// admitted, delayed, refused).
	AttrOutcome = attribute.Key("ringlimit.outcome")
	// AttrLimiter is the name a Source was given, when not empty.
	AttrLimiter = attribute.Key("ringlimit.limiter")
)

// A Source is one limiter, middleware or interceptor whose counters
// Register reads: build one with Engine, HTTP, GRPC, GRPCClient, Backend
// or Audit. A Source given a bad argument holds the error, and Register
// returns it. The zero Source is invalid.
type Source struct {
	kind    *kind
	limiter string
	read    func() []num // one value per series of the kind, in order
	err     error
}

// maxCount is the largest count observed: a uint64 counter past it is
// observed as maxCount, never as a negative int64. It is 2^62, not
// MaxInt64, because the SDK may carry an int64 through a float64, where
// MaxInt64 rounds to 2^63 and converts back to MinInt64.
const maxCount = 1 << 62

// num is one observed value: an integer count, or a float for the
// instruments that are floats (seconds, a ratio).
type num struct {
	i uint64
	f float64
}

// Outcomes is the shape of grpclimit.Stats (and of httplimit.Stats):
// GRPC accepts any type of this shape, so otellimit need not import
// grpclimit (and gRPC).
type Outcomes interface{ ~adapter.Counts }

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

// BackendStats are a shared limiter's failure counters, as redisstore's
// Stats carry them (see Backend).
type BackendStats struct {
	Failures          uint64 // calls to the backend that failed
	FallbackDecisions uint64 // decisions its failure policy made instead
	CallerGone        uint64 // calls not decided because the caller's context ended first; not failures
}

func isNil(v any) bool {
	r := reflect.ValueOf(v)
	return !r.IsValid() || (r.Kind() == reflect.Pointer || r.Kind() == reflect.Func || r.Kind() == reflect.Interface) && r.IsNil()
}

func newSource(k *kind, limiter string, src any, read func() []num) Source {
	if isNil(src) {
		return Source{err: fmt.Errorf("otellimit: %s(%q, nil)", k.name, limiter)}
	}
	return Source{kind: k, limiter: limiter, read: read}
}

func ints(vs ...uint64) []num {
	out := make([]num, len(vs))
	for i, v := range vs {
		out[i].i = v
	}
	return out
}

// Engine reads an engine's key statistics (engine.Stats): ringlimit.keys
// (an up-down counter: keys held now), ringlimit.keys.evicted and
// ringlimit.keys.refused (counters). limiter names it in the
// ringlimit.limiter attribute; "" leaves the attribute out.
func Engine(limiter string, e interface{ Stats() engine.Stats }) Source {
	return newSource(kindEngine, limiter, e, func() []num {
		s := e.Stats()
		return ints(uint64(max(s.Keys, 0)), uint64(max(s.Evicted, 0)), uint64(max(s.Refused, 0)))
	})
}

// HTTP reads an httplimit.Middleware's counters (httplimit.Stats):
// ringlimit.requests, by ringlimit.outcome (allowed, denied, rejected,
// error, canceled, would_deny).
func HTTP(limiter string, m interface{ Stats() httplimit.Stats }) Source {
	return newSource(kindHTTP, limiter, m, func() []num {
		s := m.Stats()
		return ints(s.Allowed, s.Denied, s.Rejected, s.Errors, s.Canceled, s.WouldDeny)
	})
}

// GRPC reads a grpclimit.Interceptor's counters: ringlimit.grpc.decisions,
// by ringlimit.outcome, with HTTP's outcomes.
func GRPC[S Outcomes](limiter string, i interface{ Stats() S }) Source {
	return newSource(kindGRPC, limiter, i, func() []num {
		s := adapter.Counts(i.Stats())
		return ints(s.Allowed, s.Denied, s.Rejected, s.Errors, s.Canceled, s.WouldDeny)
	})
}

// GRPCClient reads a grpclimit.Client's counters:
// ringlimit.grpc.client.calls by ringlimit.outcome (admitted, delayed,
// refused, canceled, error), and ringlimit.grpc.client.wait, the seconds
// calls spent waiting for the limiter.
func GRPCClient[S ClientOutcomes](limiter string, c interface{ Stats() S }) Source {
	return newSource(kindClient, limiter, c, func() []num {
		s := clientOutcomes(c.Stats())
		v := ints(s.Admitted, s.Delayed, s.Refused, s.Canceled, s.Errors, 0)
		v[5] = num{f: s.Waited.Seconds()}
		return v
	})
}

// Backend reads a shared limiter's failure counters from f:
// ringlimit.backend.failures, ringlimit.backend.fallback_decisions and
// ringlimit.backend.caller_gone. A caller that left before the backend
// answered is counted in caller_gone, never in failures. For a
// *redisstore.Limiter rl:
//
//	otellimit.Backend("redis", func() otellimit.BackendStats {
//		s := rl.Stats()
//		return otellimit.BackendStats{Failures: s.Failures, FallbackDecisions: s.FallbackDecisions, CallerGone: s.CallerGone}
//	})
//
// It takes a function rather than the limiter so that otellimit does not
// depend on redisstore's module, and with it on the Redis client.
func Backend(limiter string, f func() BackendStats) Source {
	return newSource(kindBackend, limiter, f, func() []num {
		s := f()
		return ints(s.Failures, s.FallbackDecisions, s.CallerGone)
	})
}

// Audit reads an engine's self-audit (engine.AuditReport, with
// Config.Audit set): ringlimit.audit.decisions and
// ringlimit.audit.false_decisions by ringlimit.outcome (allowed: false
// admits; denied: false denies), ringlimit.audit.unjudged,
// ringlimit.audit.skipped, ringlimit.audit.dropped, ringlimit.audit.keys
// and the gauge ringlimit.audit.worst_window (a ratio to the limit). Each
// collection calls Audit once, which drains the audit's buffer.
func Audit(limiter string, e interface{ Audit() engine.AuditReport }) Source {
	return newSource(kindAudit, limiter, e, func() []num {
		r := e.Audit()
		v := ints(uint64(max(r.Admits, 0)), uint64(max(r.Denies, 0)), uint64(max(r.FalseAdmits, 0)), uint64(max(r.FalseDenies, 0)),
			uint64(max(r.Unjudged, 0)), 0, uint64(max(r.Keys, 0)), uint64(max(r.Skipped, 0)), uint64(max(r.Dropped, 0)))
		v[5] = num{f: r.WorstWindow}
		return v
	})
}

// Option configures Register.
type Option func(*config)

type config struct {
	provider metric.MeterProvider
}

// WithMeterProvider sets the MeterProvider whose Meter (ScopeName) makes
// the instruments. It is required: otellimit depends on the metric API
// alone, not on the otel package's global provider; pass
// otel.GetMeterProvider() to use that one.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) { c.provider = p }
}

// Registration is what Register made: the instruments' callbacks. It is
// safe for concurrent use.
type Registration struct {
	regs []metric.Registration
}

// Unregister stops the callbacks: later collections read no Source. The
// instruments stay with the Meter, with no value. It returns the
// MeterProvider's errors, joined.
func (r *Registration) Unregister() error {
	var errs []error
	for _, reg := range r.regs {
		errs = append(errs, reg.Unregister())
	}
	r.regs = nil
	return errors.Join(errs...)
}

// Register makes the instruments of every kind of Source given and one
// callback per Source, which reads that Source once per collection and
// observes each of its series. Each Source's limiter name, when not
// empty, is its ringlimit.limiter attribute; two Sources of one kind need
// distinct names ("" counts as a name). A nil Source argument, a name
// that is not UTF-8, a missing WithMeterProvider, or an error of the
// MeterProvider is an error, and nothing stays registered.
//
// Register once per set of Sources: a second Register of the same Source
// with the same provider observes its series twice.
func Register(sources []Source, opts ...Option) (*Registration, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	var errs []error
	if isNil(c.provider) {
		errs = append(errs, errors.New("otellimit: Register: no MeterProvider; pass WithMeterProvider (otel.GetMeterProvider() for the global one)"))
	}
	seen := map[*kind]map[string]bool{}
	for _, s := range sources {
		switch {
		case s.err != nil:
			errs = append(errs, s.err)
		case s.kind == nil:
			errs = append(errs, errors.New("otellimit: Register: the zero Source (build one with Engine, HTTP, GRPC, GRPCClient, Backend or Audit)"))
		case !utf8.ValidString(s.limiter):
			errs = append(errs, fmt.Errorf("otellimit: %s(%q, …): the name is not valid UTF-8", s.kind.name, s.limiter))
		case seen[s.kind][s.limiter]:
			errs = append(errs, fmt.Errorf("otellimit: Register: two %s sources named %q; name each distinctly, for the ringlimit.limiter attribute", s.kind.name, s.limiter))
		default:
			if seen[s.kind] == nil {
				seen[s.kind] = map[string]bool{}
			}
			seen[s.kind][s.limiter] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	meter := c.provider.Meter(ScopeName)
	insts := map[*kind][]metric.Observable{}
	reg := &Registration{}
	for _, s := range sources {
		obs, ok := insts[s.kind]
		if !ok {
			var err error
			if obs, err = s.kind.instruments(meter); err != nil {
				_ = reg.Unregister()
				return nil, err
			}
			insts[s.kind] = obs
		}
		r, err := meter.RegisterCallback(s.callback(obs), obs...)
		if err != nil {
			_ = reg.Unregister()
			return nil, fmt.Errorf("otellimit: Register: %s(%q): %w", s.kind.name, s.limiter, err)
		}
		reg.regs = append(reg.regs, r)
	}
	return reg, nil
}

// callback returns the function that observes s's series on obs, the
// instruments of s's kind. The attribute sets are built here, once.
func (s Source) callback(obs []metric.Observable) metric.Callback {
	k := s.kind
	attrs := make([]metric.ObserveOption, len(k.series))
	for i, sr := range k.series {
		var kv []attribute.KeyValue
		if s.limiter != "" {
			kv = append(kv, AttrLimiter.String(s.limiter))
		}
		if sr.outcome != "" {
			kv = append(kv, AttrOutcome.String(sr.outcome))
		}
		attrs[i] = metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	return func(_ context.Context, o metric.Observer) error {
		vals := s.read()
		for i, sr := range k.series {
			switch inst := obs[sr.inst].(type) {
			case metric.Int64Observable:
				o.ObserveInt64(inst, int64(min(vals[i].i, maxCount)), attrs[i])
			case metric.Float64Observable:
				o.ObserveFloat64(inst, vals[i].f, attrs[i])
			}
		}
		return nil
	}
}
