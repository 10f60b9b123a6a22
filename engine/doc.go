// Package engine is ringlimit's in-process limiter: for any string key (a
// tenant, an API key, an IP) it decides, without a lock and without an
// allocation, whether n more units fit the key's limit in a sliding window
// (or a token bucket).
//
// New takes a Config (Limit and Window are required) and returns an
// Engine; Close stops its background sweeper. The entry points:
//
//   - Allow, AllowN and AllowAt decide and record; AllowAt takes the time
//     from the caller, the others read the engine's Clock. A Decision
//     carries Allowed, Limit, Remaining and RetryAfter.
//   - Reserve and ReserveAt decide like AllowAt and return a Reservation,
//     which can be cancelled (Cancel) or settled to the cost the work
//     turned out to have (Settle); ChargeAt records a cost nothing
//     reserved. AllowAll admits several requests, on one or several
//     engines, all or none. Wait blocks until a request fits.
//   - SetLimit, Config.KeyLimit and UpdateLimits give keys their own
//     limits; Reset forgets a key's counts.
//   - Config.Audit shadows a sample of keys with an exact log, and Audit
//     reports how the algorithm did on the live traffic.
//
// Config.Algorithm picks the estimate: SlidingWindow (the default; a
// window can hold just under 2·Limit in the worst case, about
// (1+1/N)·Limit for smooth traffic), SlidingWindowStrict (never more than
// Limit in any window), FixedWindow (one counter per aligned window),
// SlidingLog (exact, 8 bytes per unit of the limit per key) and
// TokenBucket (GCRA, as golang.org/x/time/rate: Limit per Window refilled
// continuously, bursts up to Config.Burst, one word per key).
//
//	e, err := engine.New(engine.Config{Limit: 100, Window: time.Second})
//	if err != nil {
//		return err // the bad field, named with its allowed range
//	}
//	defer e.Close()
//	if d := e.AllowN("tenant-42", 1); !d.Allowed {
//		// refuse, and retry after d.RetryAfter
//	}
//
// What each decision means, with time, keys, idle keys and reservations:
// docs/semantics.md. The algorithm, the lock-free protocol and its
// proofs: docs/design.md. The net/http middleware over an Engine is
// package httplimit; the same limit shared by several processes through
// Redis is module redisstore.
package engine
