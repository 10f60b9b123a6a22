// Package httplimit is net/http middleware over a ringlimit engine: it keys
// each request (by client IP by default), charges it a cost, and answers
// 429 Too Many Requests when the key's window is full.
//
// Responses carry the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-09 (Structured Fields: a quoted
// policy name with q= quota and w= window seconds; r= remaining and t=
// seconds until capacity frees), and optionally the legacy X-RateLimit-*
// headers.
//
// Status codes:
//
//   - 429 with Retry-After: the key's window has no room now.
//   - 503 with Retry-After: the key is new and the engine holds
//     Config.MaxKeys keys.
//   - 413: the request's cost exceeds the key's limit; it can never fit.
//   - 400: the key function failed, or the cost is ≤ 0. A key error never
//     falls back silently to a shared key.
//   - 500: the limiter refused the key's limit itself (a KeyLimit result
//     out of range).
package httplimit
