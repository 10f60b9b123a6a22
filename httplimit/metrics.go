package httplimit

import (
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit/engine"
)

// MetricsHandler serves m's counters and e's key statistics in the
// Prometheus text exposition format (version 0.0.4), with no dependency:
//
//	ringlimit_keys                                                     gauge
//	ringlimit_keys_evicted_total                                       counter
//	ringlimit_keys_refused_total                                       counter
//	ringlimit_requests_total{outcome="allowed|canceled|denied|error|rejected"}  counter
//
// The outcomes are Stats' fields: "error" counts requests whose
// ContextLimiter failed (its failure policy admitted or refused them),
// "canceled" those whose context ended before it answered.
// Either argument may be nil to leave its metrics out (e is nil in front
// of a Redis limiter).
//
// It is the zero-dependency fallback. A service that runs the Prometheus
// client library registers promlimit's Collector in its own registry
// instead: promlimit.New(promlimit.Engine("", e), promlimit.HTTP("", m))
// exposes the same series, and promlimit's tests check that this handler's
// body is byte for byte what client_golang writes for the same values
// (families sorted by name, series by label value, numbers formatted as
// its float64 text: 1e+06, not 1000000).
func MetricsHandler(m *Middleware, e *engine.Engine) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var ms *Stats
		var es *engine.Stats
		if m != nil {
			s := m.Stats()
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
		_, _ = w.Write(AppendMetrics(make([]byte, 0, 1024), ms, es))
	})
}

// AppendMetrics appends to b the body MetricsHandler serves for the
// middleware counters m and the engine statistics e; a nil one is left
// out.
func AppendMetrics(b []byte, m *Stats, e *engine.Stats) []byte {
	if e != nil {
		b = metric(b, "ringlimit_keys", "gauge", "Keys held by the engine.", e.Keys)
		b = metric(b, "ringlimit_keys_evicted_total", "counter", "Keys reclaimed after being idle.", e.Evicted)
		b = metric(b, "ringlimit_keys_refused_total", "counter", "New keys refused because MaxKeys keys were held.", e.Refused)
	}
	if m != nil {
		b = append(b, "# HELP ringlimit_requests_total Requests seen by the rate-limit middleware, by outcome.\n"...)
		b = append(b, "# TYPE ringlimit_requests_total counter\n"...)
		for _, c := range []struct {
			name string
			v    uint64
		}{{"allowed", m.Allowed}, {"canceled", m.Canceled}, {"denied", m.Denied}, {"error", m.Errors}, {"rejected", m.Rejected}} { // sorted, as client_golang sorts label values
			b = append(b, `ringlimit_requests_total{outcome="`...)
			b = append(b, c.name...)
			b = append(b, `"} `...)
			b = appendValue(b, float64(c.v))
			b = append(b, '\n')
		}
	}
	return b
}

func metric(b []byte, name, typ, help string, v int64) []byte {
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, help...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, '\n')
	b = append(b, name...)
	b = append(b, ' ')
	b = appendValue(b, float64(v))
	return append(b, '\n')
}

// appendValue writes a sample value as the Prometheus client library's
// text format does (prometheus/common expfmt): a float64 in Go's shortest
// 'g' form, so 1234567 is 1.234567e+06. Counters above 2^53 lose their
// low digits there too.
func appendValue(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
