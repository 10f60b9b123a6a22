// Package callergone is the one judgement of whether the caller of a
// decision has gone: its context is done, or its deadline has passed.
// redisstore, httplimit, grpclimit and the engine's Wait all ask it, so
// that a call is counted the same way everywhere: a caller who has gone is
// never admitted through a failure policy, and is never counted as a
// backend failure.
package callergone

import (
	"context"
	"time"
)

// Err returns ctx.Err() when it is set, else context.DeadlineExceeded when
// ctx's deadline has passed (at or before now), else nil.
//
// A context's deadline passes before its Err says so: context.WithDeadline
// sets Err when its timer fires, which on a loaded machine can be
// milliseconds late, and in that gap Err is nil although nobody waits for
// the answer any more. Judging by Err alone, one layer counted such a call
// as the caller's doing and the next as a backend failure.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
