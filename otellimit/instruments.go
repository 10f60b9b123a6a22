package otellimit

import (
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// A kind is the instruments of one kind of Source, and the series its
// read function returns, in order.
type kind struct {
	name   string // the Source constructor, for errors
	insts  []inst
	series []series
}

// inst is one instrument. Names follow OpenTelemetry's conventions (a
// ringlimit. namespace, no unit in the name, units in UCUM with {…} for
// counted things) and translate, through the Prometheus exporter, to
// promlimit's series names (docs/metrics.md).
type inst struct {
	name, unit, desc string
	typ              instType
}

type instType int

const (
	intCounter   instType = iota // monotonic: Int64ObservableCounter
	intUpDown                    // a level that goes both ways: Int64ObservableUpDownCounter
	floatCounter                 // Float64ObservableCounter
	floatGauge                   // Float64ObservableGauge: not additive
)

type series struct {
	inst    int
	outcome string // the ringlimit.outcome attribute, or "" for none
}

func outcomeSeries(outcomes ...string) []series {
	s := make([]series, len(outcomes))
	for i, o := range outcomes {
		s[i] = series{0, o}
	}
	return s
}

var (
	kindEngine = &kind{name: "Engine", insts: []inst{
		{"ringlimit.keys", "{key}", "Keys held by the engine.", intUpDown},
		{"ringlimit.keys.evicted", "{key}", "Keys reclaimed after being idle.", intCounter},
		{"ringlimit.keys.refused", "{key}", "New keys refused because MaxKeys keys were held.", intCounter},
	}, series: []series{{0, ""}, {1, ""}, {2, ""}}}
	kindHTTP = &kind{name: "HTTP", insts: []inst{
		{"ringlimit.requests", "{request}", "Requests seen by the rate-limit middleware, by outcome.", intCounter},
	}, series: outcomeSeries("allowed", "denied", "rejected", "error", "canceled", "would_deny")}
	kindGRPC = &kind{name: "GRPC", insts: []inst{
		{"ringlimit.grpc.decisions", "{decision}", "Decisions of the gRPC interceptor (one per unary call, per stream, or per message with WithPerMessage), by outcome.", intCounter},
	}, series: outcomeSeries("allowed", "denied", "rejected", "error", "canceled", "would_deny")}
	kindClient = &kind{name: "GRPCClient", insts: []inst{
		{"ringlimit.grpc.client.calls", "{call}", "Outgoing gRPC calls paced by the client interceptor, by how they ended.", intCounter},
		{"ringlimit.grpc.client.wait", "s", "Time outgoing gRPC calls spent waiting for the limiter.", floatCounter},
	}, series: append(outcomeSeries("admitted", "delayed", "refused", "canceled", "error"), series{1, ""})}
	kindBackend = &kind{name: "Backend", insts: []inst{
		{"ringlimit.backend.failures", "{call}", "Calls to the shared limiter's backend (Redis) that failed.", intCounter},
		{"ringlimit.backend.fallback_decisions", "{decision}", "Decisions made by the failure policy because the backend failed.", intCounter},
		{"ringlimit.backend.caller_gone", "{call}", "Calls to the shared limiter answered with nothing admitted because the caller's context ended first: the caller's doing, not backend failures.", intCounter},
	}, series: []series{{0, ""}, {1, ""}, {2, ""}}}
	kindAudit = &kind{name: "Audit", insts: []inst{
		{"ringlimit.audit.decisions", "{decision}", "Decisions of sampled keys shadowed by the engine's self-audit (Config.Audit), by outcome.", intCounter},
		{"ringlimit.audit.false_decisions", "{decision}", "Shadowed decisions the exact log disagrees with: outcome allowed is a false admit, denied a false deny.", intCounter},
		{"ringlimit.audit.unjudged", "{decision}", "Shadowed decisions not judged, because units of their window may be missing from the log.", intCounter},
		{"ringlimit.audit.worst_window", "1", "The most units the engine admitted in one window for a sampled key, over its limit, since the engine started.", floatGauge},
		{"ringlimit.audit.keys", "{key}", "Sampled keys with an exact log now.", intUpDown},
		{"ringlimit.audit.skipped", "{decision}", "Decisions of sampled keys not shadowed because AuditMaxKeys or AuditMaxEntries was reached.", intCounter},
		{"ringlimit.audit.dropped", "{decision}", "Decisions of sampled keys that found the audit buffer full.", intCounter},
	}, series: []series{{0, "allowed"}, {0, "denied"}, {1, "allowed"}, {1, "denied"}, {2, ""}, {3, ""}, {4, ""}, {5, ""}, {6, ""}}}
)

// instruments makes k's instruments on m, in k.insts's order.
func (k *kind) instruments(m metric.Meter) ([]metric.Observable, error) {
	out := make([]metric.Observable, len(k.insts))
	for i, in := range k.insts {
		var (
			o   metric.Observable
			err error
		)
		switch in.typ {
		case intCounter:
			o, err = m.Int64ObservableCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		case intUpDown:
			o, err = m.Int64ObservableUpDownCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		case floatCounter:
			o, err = m.Float64ObservableCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		case floatGauge:
			o, err = m.Float64ObservableGauge(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		}
		if err != nil {
			return nil, fmt.Errorf("otellimit: the instrument %s: %w", in.name, err)
		}
		out[i] = o
	}
	return out, nil
}
