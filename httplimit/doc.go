// Package httplimit is net/http middleware over a ringlimit limiter (an
// in-process *engine.Engine, or a shared one such as *redisstore.Limiter):
// it keys each request (by client IP by default), charges it a cost, and
// answers 429 Too Many Requests when the key's window is full.
//
// Responses carry the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-09 (Structured Field Lists: a quoted
// policy name with q= quota and w= window seconds; r= remaining and t=
// seconds until the quota is free), one list member per middleware, and
// optionally the legacy X-RateLimit-* headers. See Middleware.
//
// Several limits on one request (per IP and per tenant) go either in one
// middleware, NewMulti, which over engines charges all of them or none,
// or in nested middlewares, each of which charges its own limit
// independently, also for requests an inner one then refuses.
//
// Units can be held across the handler: WithSettle reserves the cost as
// an estimate and settles it to what the handler reports with ReportCost
// (tokens per minute for an LLM gateway); WithInFlight gives the units
// back when the handler returns, so that the limit counts requests in
// flight.
//
// # Configuration errors
//
// A mistake in the server's configuration is the server's problem, never a
// client's: it is reported once, at construction, and no request is ever
// answered 4xx or 5xx because of it. The convention, everywhere:
//
//   - NewMiddleware returns (*Middleware, error); New returns the
//     func(http.Handler) http.Handler and panics at construction, as
//     regexp.MustCompile does.
//   - Options and Key helpers never fail by themselves: a bad argument
//     (KeyByIP(200), KeyByRoute(nil, …), an empty trusted list,
//     WithHeadersBelow(2), a WithPolicyName window that disagrees with the
//     limiter's) travels inside the Option or Key, and NewMiddleware
//     returns it, naming the function, the argument and its allowed range.
//     Key.Err reports a Key's own.
//   - Constructors that are not options (NewTiers) return an error.
//
// # Status codes
//
//   - 429 with Retry-After: the key's window has no room now.
//   - 503 with Retry-After: the key is new and the engine holds
//     Config.MaxKeys keys; or a ContextLimiter failed and its failure
//     policy refused (Retry-After only when the policy gives a wait).
//   - 413: the request's cost exceeds the key's limit; it can never fit.
//   - 400: the key depends on the request and the request does not give
//     it (a missing header, a forged or unparsable forwarding chain), or
//     gives one longer than MaxKeyBytes (256 bytes, the one cap of every
//     key; never truncated), or a key function returned an empty key (or
//     only white space; a Compose part, a KeyByRoute inner key, a
//     MissingFallback's key included). A key error never falls back
//     silently to a shared key.
//   - 500: a bug the server's code showed at run time and construction
//     could not see: a cost function returned a negative cost, or an
//     engine Config.KeyLimit function returned a limit out of range.
package httplimit
