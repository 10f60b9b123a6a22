package adapter

import (
	"strconv"

	"github.com/ringlimit/ringlimit/engine"
)

// AppendMetrics appends to b the body httplimit.MetricsHandler serves for
// the middleware counters m and the engine statistics e, in the Prometheus
// text format (version 0.0.4), as client_golang writes it; a nil one is
// left out.
func AppendMetrics(b []byte, m *Counts, e *engine.Stats) []byte {
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
		}{{"allowed", m.Allowed}, {"canceled", m.Canceled}, {"denied", m.Denied}, {"error", m.Errors}, {"rejected", m.Rejected}, {"would_deny", m.WouldDeny}} { // sorted, as client_golang sorts label values
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
