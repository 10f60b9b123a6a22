package adapter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// ErrNoSettle is ReportCost's error when no middleware or interceptor with
// WithSettle runs around the handler (httplimit.ErrNoSettle and
// grpclimit.ErrNoSettle are this value).
var ErrNoSettle = errors.New("ReportCost: no middleware or interceptor with WithSettle runs around this handler; the cost was not recorded")

// Reported is the cost a handler reports for its request (ReportCost),
// one cell per request, which every settling middleware around the
// handler reads: stacked middlewares share the innermost handler's report.
// The zero Reported holds no report.
type Reported struct {
	n   atomic.Int64
	set atomic.Bool
}

// Get returns the last cost reported, and whether one was.
func (c *Reported) Get() (int64, bool) {
	if !c.set.Load() {
		return 0, false
	}
	return c.n.Load(), true
}

type reportedKey struct{}

// WithReported returns ctx carrying a Reported cell, and the cell: ctx's
// own when a middleware around this one put one there already, so that
// one report reaches every settling middleware.
func WithReported(ctx context.Context) (context.Context, *Reported) {
	if c, ok := ctx.Value(reportedKey{}).(*Reported); ok {
		return ctx, c
	}
	c := new(Reported)
	return context.WithValue(ctx, reportedKey{}, c), c
}

// NoSettle is ErrNoSettle after prefix ("httplimit: "), built once, for
// Report.
func NoSettle(prefix string) error { return fmt.Errorf("%s%w", prefix, ErrNoSettle) }

// Report records n ≥ 0 as the request's actual cost in ctx's cell: the
// last report wins. It refuses a negative n, and returns noSettle (a
// NoSettle) for a ctx without a cell; prefix names the package
// ("httplimit: ").
func Report(ctx context.Context, n int64, prefix string, noSettle error) error {
	c, ok := ctx.Value(reportedKey{}).(*Reported)
	if !ok {
		return noSettle
	}
	if n < 0 {
		return errors.New(prefix + "ReportCost(" + strconv.FormatInt(n, 10) + "): want a cost ≥ 0; the earlier report, or the estimate, stands")
	}
	c.n.Store(n)
	c.set.Store(true)
	return nil
}
