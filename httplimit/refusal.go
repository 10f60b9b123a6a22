package httplimit

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit/engine"
)

// RefusalKind is why a Middleware refused a request.
type RefusalKind uint8

// The refusals, with the status of their default answer (see Middleware).
const (
	RefusalLimited       RefusalKind = iota + 1 // 429: the key is over its limit
	RefusalKeysFull                             // 503: the engine holds Config.MaxKeys keys, and the key is new
	RefusalUnavailable                          // 503: the ContextLimiter failed and its failure policy refused
	RefusalCallerGone                           // 503: the request's context ended before a failed ContextLimiter answered
	RefusalTooCostly                            // 413: the request's cost exceeds the key's limit
	RefusalBadKey                               // 400: no key (the Key's error, or a key above a cap)
	RefusalMisconfigured                        // 500: a negative cost, or a limit the engine rejected
)

// String returns the kind's name without its prefix: "limited",
// "keys-full", "unavailable", "caller-gone", "too-costly", "bad-key" or
// "misconfigured".
func (k RefusalKind) String() string {
	switch k {
	case RefusalLimited:
		return "limited"
	case RefusalKeysFull:
		return "keys-full"
	case RefusalUnavailable:
		return "unavailable"
	case RefusalCallerGone:
		return "caller-gone"
	case RefusalTooCostly:
		return "too-costly"
	case RefusalBadKey:
		return "bad-key"
	case RefusalMisconfigured:
		return "misconfigured"
	}
	return "RefusalKind(" + strconv.Itoa(int(k)) + ")"
}

// A Refusal is a request the Middleware refuses, as a WithRefusalHandler
// handler receives it.
type Refusal struct {
	Kind RefusalKind
	// Status is the status of the default answer: 429, 503, 413, 400 or
	// 500.
	Status int
	// Decision is the limiter's Decision; the zero Decision for
	// RefusalBadKey, and for RefusalMisconfigured by a negative cost,
	// which come before the limiter is asked.
	Decision engine.Decision
	// Err is the Key's error (RefusalBadKey); the ContextLimiter's error
	// (RefusalUnavailable; under NewMulti, ErrPolicyFailed); the request
	// context's error (RefusalCallerGone); for RefusalMisconfigured, what
	// was wrong; nil otherwise.
	Err error
	// Cost is the units the request was to consume; 0 for RefusalBadKey.
	Cost int64
	// RetryAfter is the Retry-After the middleware set, in whole seconds,
	// or -1 when it set none.
	RetryAfter int64
}

// ErrPolicyFailed is Refusal.Err for RefusalUnavailable under NewMulti:
// a policy's ContextLimiter failed, and its failure policy refused.
var ErrPolicyFailed = errors.New("httplimit: a policy's rate limiter failed, and its failure policy refused the request")

var (
	errNegativeCost  = errors.New("httplimit: WithCost returned a negative cost")
	errLimitRejected = errors.New("httplimit: the limiter rejected this key's limit (outside 1 … MaxLimit, or above the engine's MaxLogLimit)")
)

// WriteRefusal writes the answer the Middleware gives ref without a
// refusal handler (see Middleware): a small JSON or plain-text body for
// 429 and for 503 (by the request's Accept), plain text otherwise. A
// refusal handler calls it for the kinds it leaves alone.
func WriteRefusal(w http.ResponseWriter, r *http.Request, ref Refusal) {
	switch ref.Kind {
	case RefusalLimited:
		writeDenial(w, r, http.StatusTooManyRequests, "rate limited", ref.RetryAfter)
	case RefusalKeysFull:
		writeDenial(w, r, http.StatusServiceUnavailable, "too many clients", ref.RetryAfter)
	case RefusalUnavailable:
		writeDenial(w, r, http.StatusServiceUnavailable, "rate limiter unavailable", ref.RetryAfter)
	case RefusalCallerGone:
		plainError(w, http.StatusServiceUnavailable, "request ended before the rate limiter answered")
	case RefusalTooCostly:
		plainError(w, http.StatusRequestEntityTooLarge,
			"request cost "+strconv.FormatInt(ref.Cost, 10)+" exceeds the limit "+
				strconv.FormatInt(ref.Decision.Limit, 10)+" per window")
	case RefusalBadKey:
		msg := "httplimit: no key for this request"
		if ref.Err != nil {
			msg = ref.Err.Error()
		}
		plainError(w, http.StatusBadRequest, msg)
	default:
		if ref.Cost < 0 {
			plainError(w, http.StatusInternalServerError, "rate limit misconfigured: negative request cost")
		} else {
			plainError(w, http.StatusInternalServerError, "rate limit misconfigured for this client")
		}
	}
}

// WithRefusalHandler sets the answer to every refusal: h gets the
// Refusal, with its kind, default status, Decision and error, after the
// middleware has set the headers that belong to it (Retry-After and the
// rate-limit fields, as for the default answer) and counted it. h may
// answer some kinds and pass the others to WriteRefusal.
//
// WithDenyHandler (429) and WithKeyErrorHandler (400), where given, answer
// their kind before h. A handler of any of the three that writes nothing
// (no WriteHeader, no Write) leaves the default answer in place: the
// middleware writes it after the handler returns, so a handler may only
// log, or only add headers. A handler that panics is a handler panicking:
// the panic goes up to net/http, which drops the connection, with the
// refusal counted. Under WithDryRun nothing is refused, so h runs only for
// RefusalCallerGone. h must not be nil.
func WithRefusalHandler(h func(w http.ResponseWriter, r *http.Request, ref Refusal)) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("httplimit: WithRefusalHandler(nil), want a handler")
		}
		c.refusal = h
		return nil
	}
}

// answer serves a refusal that the middleware has counted and whose
// headers it has set: the handler of its kind, else the default answer.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, ref Refusal) {
	switch {
	case ref.Kind == RefusalLimited && m.cfg.deny != nil:
		custom(w, r, ref, func(cw http.ResponseWriter) {
			m.cfg.deny.ServeHTTP(cw, r.WithContext(context.WithValue(r.Context(), decisionKey{}, ref.Decision)))
		})
	case ref.Kind == RefusalBadKey && m.cfg.keyErr != nil:
		custom(w, r, ref, func(cw http.ResponseWriter) { m.cfg.keyErr(cw, r, ref.Err) })
	case m.cfg.refusal != nil:
		custom(w, r, ref, func(cw http.ResponseWriter) { m.cfg.refusal(cw, r, ref) })
	default:
		WriteRefusal(w, r, ref)
	}
}

// custom runs a user's refusal handler on w, and writes the default
// answer if it wrote nothing: net/http would otherwise send 200 OK with an
// empty body, an answer that says the request was served.
func custom(w http.ResponseWriter, r *http.Request, ref Refusal, h func(http.ResponseWriter)) {
	cw := &refusalWriter{ResponseWriter: w}
	h(cw)
	if !cw.wrote {
		WriteRefusal(w, r, ref)
	}
}

// refusalWriter notes whether a handler has begun its response (a status
// of 200 or more, a Write, a Flush or a Hijack). Unwrap lets
// http.ResponseController reach the writer underneath.
type refusalWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *refusalWriter) WriteHeader(code int) {
	if code >= 200 { // 1xx (103 Early Hints) does not begin the response
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush sends a 200 (net/http's rule for a flush before WriteHeader), so
// it begins the response.
func (w *refusalWriter) Flush() {
	w.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler, which answers on it.
func (w *refusalWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.wrote = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
