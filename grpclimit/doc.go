// Package grpclimit is gRPC server and client interceptors over a
// ringlimit limiter (an in-process *engine.Engine, or a shared one such as
// *redisstore.Limiter): the gRPC counterpart of httplimit, with the same
// keys, the same proxy rules and the same rate-limit field values.
//
// On the server, an Interceptor keys each call (by peer IP by default),
// charges it a per-method cost, and answers codes.ResourceExhausted with a
// google.rpc.RetryInfo detail when the key's window is full; health
// checks and reflection are exempt by default. On the client, a Client
// paces outgoing calls, for an egress limit towards a third-party API.
// Several limits on one call (per IP and per tenant) go in one
// interceptor, NewMultiInterceptor, which over engines charges all of them
// or none, or in chained interceptors, each of which charges its own limit
// independently. WithSettle settles a call's estimated cost to what its
// handler reports with ReportCost; WithInFlight counts calls (and
// streams) in flight.
//
// # Configuration errors
//
// As in httplimit, a mistake in the server's configuration is reported
// once, at construction, and never answered to a client: NewInterceptor
// and NewClient return (value, error); UnaryServerInterceptor,
// StreamServerInterceptor, UnaryClientInterceptor and
// StreamClientInterceptor panic at construction, as regexp.MustCompile
// does. Options and Key helpers carry their errors to the constructor.
//
// # Status codes
//
//   - ResourceExhausted with RetryInfo: the key's window has no room now.
//   - Unavailable: the key is new and the engine holds Config.MaxKeys keys
//     (with RetryInfo, the engine's hint); or a ContextLimiter failed and
//     its failure policy refused (with RetryInfo when the policy gives a
//     wait).
//   - FailedPrecondition: the call's cost exceeds the key's limit; it can
//     never fit.
//   - InvalidArgument: the key depends on the call and the call does not
//     give it (missing metadata, a forged forwarding chain), unless a
//     KeyFunc returned its own status; or gives one longer than
//     MaxKeyBytes (256 bytes, the one cap of every key, as in httplimit;
//     never truncated); or a key function returned an empty key (or only
//     white space; a Compose part or a MissingFallback's key included). A
//     key error never falls back silently to a shared key.
//   - Internal: a bug or a deployment the construction could not see: a
//     negative cost from WithCost, a limit the engine rejected, a peer
//     that is not an IP address (a Unix socket) under KeyByIP.
package grpclimit
