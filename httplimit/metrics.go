package httplimit

import (
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit/engine"
)

// MetricsHandler serves m's counters and e's key statistics in the
// Prometheus text exposition format (version 0.0.4):
//
//	ringlimit_requests_total{outcome="allowed|denied|rejected|error"}  counter
//	ringlimit_keys                                                     gauge
//	ringlimit_keys_evicted_total                                       counter
//	ringlimit_keys_refused_total                                       counter
//
// The outcomes are Stats' fields: "error" counts requests whose
// ContextLimiter failed (its failure policy admitted or refused them).
// Either argument may be nil to leave its metrics out (e is nil in front
// of a Redis limiter).
func MetricsHandler(m *Middleware, e *engine.Engine) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b := make([]byte, 0, 1024)
		if m != nil {
			s := m.Stats()
			b = append(b, "# HELP ringlimit_requests_total Requests seen by the rate-limit middleware, by outcome.\n"...)
			b = append(b, "# TYPE ringlimit_requests_total counter\n"...)
			for _, c := range []struct {
				name string
				v    uint64
			}{{"allowed", s.Allowed}, {"denied", s.Denied}, {"rejected", s.Rejected}, {"error", s.Errors}} {
				b = append(b, `ringlimit_requests_total{outcome="`...)
				b = append(b, c.name...)
				b = append(b, `"} `...)
				b = strconv.AppendUint(b, c.v, 10)
				b = append(b, '\n')
			}
		}
		if e != nil {
			s := e.Stats()
			b = metric(b, "ringlimit_keys", "gauge", "Keys held by the engine.", s.Keys)
			b = metric(b, "ringlimit_keys_evicted_total", "counter", "Keys reclaimed after being idle.", s.Evicted)
			b = metric(b, "ringlimit_keys_refused_total", "counter", "New keys refused because MaxKeys keys were held.", s.Refused)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(b)
	})
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
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\n')
}
