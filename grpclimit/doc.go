// Package grpclimit is gRPC server and client interceptors over a
// ringlimit limiter (an in-process *engine.Engine, or a shared one such as
// *redisstore.Limiter): the gRPC counterpart of httplimit, with the same
// keys, the same proxy rules and the same rate-limit field values.
//
//	limit, err := grpclimit.NewInterceptor(e, grpclimit.WithMethodCost("/shop.Cart/Checkout", 5))
//	...
//	srv := grpc.NewServer(grpc.UnaryInterceptor(limit.Unary()), grpc.StreamInterceptor(limit.Stream()))
//
// The entry points:
//
//   - NewInterceptor (or UnaryServerInterceptor and StreamServerInterceptor,
//     which panic) builds an Interceptor: it keys each call (by peer IP by
//     default), charges it a per-method cost, and answers
//     codes.ResourceExhausted with a google.rpc.RetryInfo detail when the
//     key's window is full. Health checks and reflection are exempt by
//     default. Interceptor lists the status codes.
//   - NewMultiInterceptor decides several Policy values in one
//     interceptor, all or nothing over engines.
//   - Keys: KeyByIP, KeyByXForwardedFor, KeyByForwarded, KeyByMetadata,
//     KeyByMethod, Compose, KeyFunc.
//   - WithSettle settles a call's estimated cost to what its handler
//     reports with ReportCost; WithInFlight counts calls (and streams) in
//     flight; WithDryRun refuses nothing.
//   - NewClient (or UnaryClientInterceptor, StreamClientInterceptor) paces
//     outgoing calls, for an egress limit towards a third-party API.
//
// As in httplimit, a mistake in the configuration is reported once, at
// construction, naming the option and its allowed range, and is never
// answered to a client. The tour is docs/grpc.md in the repository.
package grpclimit
