package httplimit

import (
	"net/http"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// MetricsHandler serves m's counters and e's key statistics in the
// Prometheus text exposition format (version 0.0.4), with no dependency:
//
//	ringlimit_keys                                                     gauge
//	ringlimit_keys_evicted_total                                       counter
//	ringlimit_keys_refused_total                                       counter
//	ringlimit_requests_total{outcome="allowed|canceled|denied|error|rejected|would_deny"}  counter
//
// The outcomes are Stats' fields: "error" counts requests whose
// ContextLimiter failed (its failure policy admitted or refused them),
// "canceled" those whose context ended before it answered, "would_deny"
// the refusals WithDryRun let through.
// Either argument may be nil to leave its metrics out (e is nil in front
// of a Redis limiter).
//
// It is the zero-dependency fallback: promlimit.New(promlimit.Engine("",
// e), promlimit.HTTP("", m)) exposes the same series, byte for byte, in a
// Prometheus client registry (docs/metrics.md).
func MetricsHandler(m *Middleware, e *engine.Engine) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var ms *adapter.Counts
		var es *engine.Stats
		if m != nil {
			s := m.counts.Load()
			ms = &s
		}
		if e != nil {
			s := e.Stats()
			es = &s
		}
		// The Content-Type promhttp sends for this format: escaping names
		// the scheme for names outside the legacy character set; these
		// have none.
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8; escaping=underscores")
		_, _ = w.Write(adapter.AppendMetrics(make([]byte, 0, 1024), ms, es))
	})
}
