package grpclimit

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What a call is charged: whether it is exempt, its key and its cost.

// exempt reports whether a call to method is exempt: its method or its
// service is in DefaultExempt() (two map lookups of substrings, no
// allocation), or a WithExempt function says so.
func (i *Interceptor) exempt(ctx context.Context, method string) bool {
	if len(i.cfg.defaultExempt) > 0 {
		if i.cfg.defaultExempt[method] {
			return true
		}
		if j := strings.LastIndexByte(method, '/'); j > 0 && i.cfg.defaultExempt[method[:j+1]] {
			return true
		}
	}
	for _, f := range i.cfg.exempt {
		if f(ctx, method) {
			return true
		}
	}
	return false
}

// prepare computes a call's key and cost; an error is the call's status,
// and the call is counted Rejected.
func (i *Interceptor) prepare(ctx context.Context, method string) (string, int64, error) {
	key, err := i.keyOf(ctx, method, i.cfg.key)
	if err != nil {
		return "", 0, err
	}
	cost, err := i.costOf(ctx, method)
	return key, cost, err
}

// keyOf computes the call's key with k; an error is the call's status,
// and the call is counted Rejected.
func (i *Interceptor) keyOf(ctx context.Context, method string, k Key) (string, error) {
	key, err := k.of(ctx, method) // an empty key and one above MaxKeyBytes are errors
	if err != nil {
		i.counts.Rejected.Add(1)
		if i.cfg.dryRun {
			return "", errDryRunPass
		}
		if s, ok := status.FromError(err); ok {
			return "", s.Err()
		}
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return key, nil
}

// costOf computes the call's cost; a negative one is codes.Internal,
// counted Rejected.
func (i *Interceptor) costOf(ctx context.Context, method string) (int64, error) {
	if i.cfg.cost != nil {
		return i.costWith(ctx, method, i.cfg.cost)
	}
	if c, ok := i.cfg.methodCost[method]; ok {
		return c, nil
	}
	return 1, nil
}

// costWith is costOf with the cost function f.
func (i *Interceptor) costWith(ctx context.Context, method string, f func(context.Context, string) int64) (int64, error) {
	cost := f(ctx, method)
	if cost < 0 {
		i.counts.Rejected.Add(1)
		if i.cfg.dryRun {
			return 0, errDryRunPass
		}
		return 0, status.Error(codes.Internal, "grpclimit: rate limit misconfigured: negative call cost")
	}
	return cost, nil
}
