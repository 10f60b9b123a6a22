package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/engine"
)

type decisionKey struct{}

// DecisionFrom returns the denial a WithDenyHandler handler is serving, and
// false outside one.
func DecisionFrom(ctx context.Context) (engine.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(engine.Decision)
	return d, ok
}

// writeDenial writes a denial's body (429, or 503): msg, and the retry
// delay in seconds unless retry < 0. JSON when the Accept header prefers
// application/json to text/plain, else plain text.
func writeDenial(w http.ResponseWriter, r *http.Request, status int, msg string, retry int64) {
	h := w.Header()
	h["X-Content-Type-Options"] = []string{"nosniff"}
	var body []byte
	if prefersJSON(r.Header.Values("Accept")) {
		h["Content-Type"] = []string{"application/json"}
		body = append(body, `{"error":"`...)
		body = append(body, msg...)
		if retry >= 0 {
			body = append(body, `","retry_after_seconds":`...)
			body = strconv.AppendInt(body, retry, 10)
			body = append(body, "}\n"...)
		} else {
			body = append(body, "\"}\n"...)
		}
	} else {
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		body = append(body, msg...)
		if retry >= 0 {
			body = append(body, "; retry after "...)
			body = strconv.AppendInt(body, retry, 10)
			body = append(body, " s"...)
		}
		body = append(body, '\n')
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// prefersJSON reports whether the Accept values give application/json (or
// application/*) a higher q than text/plain (or text/*). */* counts for
// both, so it alone selects text.
func prefersJSON(accept []string) bool {
	qJSON, qText := -1.0, -1.0 // -1: not mentioned; specific beats wildcard
	var jSpec, tSpec int       // specificity of the match that set q
	for _, line := range accept {
		for part := range strings.SplitSeq(line, ",") {
			mt, params, _ := strings.Cut(part, ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
				if ok && strings.TrimSpace(k) == "q" {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
						q = f
					}
				}
			}
			switch mt {
			case "application/json":
				if jSpec <= 2 {
					qJSON, jSpec = q, 2
				}
			case "application/*":
				if jSpec < 1 {
					qJSON, jSpec = q, 1
				}
			case "text/plain":
				if tSpec <= 2 {
					qText, tSpec = q, 2
				}
			case "text/*":
				if tSpec < 1 {
					qText, tSpec = q, 1
				}
			case "*/*":
				if jSpec == 0 {
					qJSON = q
				}
				if tSpec == 0 {
					qText = q
				}
			}
		}
	}
	return qJSON > 0 && qJSON > qText
}

func plainError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}
