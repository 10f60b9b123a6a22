// Package httplimit is net/http middleware over a ringlimit limiter (an
// in-process *engine.Engine, or a shared one such as *redisstore.Limiter):
// it keys each request (by client IP by default), charges it a cost, and
// answers 429 Too Many Requests with Retry-After when the key's window is
// full. Responses carry the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-09.
//
//	e, err := engine.New(engine.Config{Limit: 5, Window: 10 * time.Second})
//	...
//	m, err := httplimit.NewMiddleware(e, httplimit.WithKey(httplimit.KeyByIP(64)))
//	...
//	mux.Handle("GET /api/", m.Handler(api))
//
// The entry points:
//
//   - NewMiddleware (or New, which panics) builds a Middleware over one
//     limiter; NewMulti over several Policy values, all or nothing over
//     engines (per IP and per tenant in one middleware).
//   - Keys: KeyByIP, KeyByXForwardedFor, KeyByForwarded and
//     KeyByClientIPHeader behind proxies, KeyByHeader, KeyByRoute, Compose,
//     KeyFunc.
//   - Costs: WithCost; WithSettle settles an estimate to the cost the
//     handler reports with ReportCost; WithInFlight counts requests in
//     flight.
//   - Refusals: WithRefusalHandler (every kind), WithDenyHandler (429),
//     WithKeyErrorHandler (400); WithDryRun refuses nothing.
//   - Tiers is a hot-swappable tenant → limit table for
//     engine.Config.KeyLimit; MetricsHandler serves Stats in the
//     Prometheus text format.
//
// A mistake in the server's configuration is reported once, at
// construction, naming the option and its allowed range: Options and Key
// helpers carry their error to NewMiddleware, and no request is ever
// answered 4xx or 5xx because of it. Middleware lists the status codes.
//
// The tour, with the header fields' reasoning, is docs/http.md in the
// repository.
package httplimit
