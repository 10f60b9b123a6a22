// Package adapter is the plumbing that httplimit and grpclimit share: the
// limiter shapes they accept, the outcome of a decision, key bounds, the
// rate-limit field values and the proxy-chain walk. It has no
// compatibility promise outside those two packages.
package adapter

import (
	"context"

	"github.com/ringlimit/ringlimit/internal/callergone"
)

// CallerGone returns, for a decision that failed (err != nil), the context
// error of a caller who has left, or nil: callergone's judgement of ctx,
// the one redisstore makes (ctx is done, or its deadline has passed though
// its timer has not fired). Such a decision is never admitted through the
// limiter's failure policy, whatever Decision the limiter returned with
// err: nobody waits for the answer, and admitting it would let a client buy
// uncounted handler runs by cancelling its own requests. It is not a
// backend failure either, and is counted Canceled. The limiter's own
// round-trip timeout, which ends a context derived from ctx, leaves ctx
// itself live, and stays a backend failure.
func CallerGone(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return callergone.Err(ctx)
}
