package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MaxPolicies is the most policies NewMultiInterceptor takes: 8, as
// httplimit.MaxPolicies.
const MaxPolicies = 8

var (
	_ [MaxPolicies - adapter.MaxPolicies]struct{}
	_ [adapter.MaxPolicies - MaxPolicies]struct{}
)

// Policy is one named quota of an Interceptor built by
// NewMultiInterceptor, a policy in the RateLimit-Policy sense: a limiter,
// the key it counts calls by, and the name and window of its value in the
// ratelimit-policy and ratelimit metadata, with WithPolicyName's rules. It
// has the shape and meaning of httplimit.Policy.
type Policy struct {
	Name    string        // 1 … 64 printable ASCII characters, distinct within an Interceptor
	Limiter any           // a Limiter or a ContextLimiter
	Key     Key           // the zero Key means KeyByIP(64)
	Window  time.Duration // 0 takes the limiter's (see WithPolicyName)
	// Cost is this policy's cost of a call (nil: WithCost's or
	// WithMethodCost's, or 1), with WithCost's rules; it is
	// httplimit.Policy.Cost.
	Cost func(ctx context.Context, fullMethod string) int64
	// InFlight puts this policy's limit on calls in flight, as
	// WithInFlight does for every policy: its units are given back when
	// the handler returns (a stream's when the stream ends). Its limiter
	// must be able to hold units.
	InFlight bool
	// Settle settles this policy's cost, an estimate, to the cost the
	// handler reports with ReportCost, as WithSettle does for every
	// policy not in flight. Its limiter must be able to hold units, and a
	// policy cannot be both in flight and settled.
	Settle bool
}

// multi holds the policies of an Interceptor built by NewMultiInterceptor.
type multi struct {
	m      *adapter.Multi
	keys   []Key
	costs  []func(ctx context.Context, fullMethod string) int64 // Policy.Cost; nil entries take the interceptor's
	fields []*adapter.Fields
}

// NewMultiInterceptor returns an Interceptor that decides each call (each
// stream, or each message with WithPerMessage) under every policy and
// admits it only if all of them admit, with one ratelimit and
// ratelimit-policy value per policy, in order. It decides as
// httplimit.NewMulti does, whose doc has the rules: all or nothing when
// every limiter is an *engine.Engine, in order otherwise (an earlier
// policy's Redis admission stays charged). A refused call ends with the
// refusing policy's status, as NewInterceptor gives it. Chained
// single-policy interceptors each charge their limit independently.
//
// opts are NewInterceptor's, except WithKey and WithPolicyName, which are
// given per policy; a call's cost (WithCost, WithMethodCost) is charged
// to every policy without a Cost of its own. WithInFlight puts every
// policy in flight, Policy.InFlight one of them; WithSettle settles every
// policy not in flight, Policy.Settle one of them, as httplimit.NewMulti
// does. 1 … MaxPolicies policies with distinct names are allowed; every
// mistake is an error naming the policy.
func NewMultiInterceptor(policies []Policy, opts ...Option) (*Interceptor, error) {
	i := &Interceptor{cfg: defaultConfig()}
	errs := i.configure("NewMultiInterceptor", opts)
	if i.cfg.keySet || i.cfg.policySet {
		errs = append(errs, errors.New("grpclimit: NewMultiInterceptor: WithKey and WithPolicyName are given per policy (Policy.Key, Policy.Name, Policy.Window)"))
	}
	mp := &multi{keys: make([]Key, len(policies)), costs: make([]func(context.Context, string) int64, len(policies))}
	specs := make([]adapter.PolicySpec, len(policies))
	for n, p := range policies {
		k := p.Key
		if k.fn == nil && k.err == nil {
			k = KeyByIP(64)
		}
		mp.keys[n] = k
		specs[n] = adapter.PolicySpec{Name: p.Name, Limiter: p.Limiter, Window: p.Window, KeyErr: k.Err()}
		mp.costs[n] = p.Cost
		if n >= MaxPolicies {
			continue // BuildMulti refuses so many
		}
		inFlight := p.InFlight || i.cfg.inFlight
		switch {
		case inFlight && p.Settle:
			errs = append(errs, fmt.Errorf("grpclimit: NewMultiInterceptor policy %d (%q): in flight (InFlight or WithInFlight) and Settle: its units are all given back, leaving nothing to settle", n, p.Name))
		case inFlight:
			i.inFlight |= 1 << n
		case p.Settle || i.cfg.settle:
			i.settle |= 1 << n
		}
	}
	i.held = i.inFlight != 0 || i.settle != 0
	if i.held && i.cfg.perMessage && !i.cfg.inFlight && !i.cfg.settle { // those configure reports
		errs = append(errs, errPerMessageHeld)
	}
	check := func(n int, where string, l any) []error {
		var errs []error
		if mp.costs[n] == nil { // WithMethodCost's costs are this policy's
			errs = i.checkCosts(where, l)
		}
		b, _ := adapter.NewBackend(l) // BuildMulti has checked it
		return append(errs, checkHold(where, l, b, i.inFlight&(1<<n) != 0, i.settle&(1<<n) != 0)...)
	}
	mm, fields, perrs := adapter.BuildMulti("grpclimit: ", "NewMultiInterceptor", specs, check)
	errs = append(errs, perrs...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	mp.m, mp.fields = mm, fields
	i.multi = mp
	i.limiter, i.fields = mm.Backend(0), fields[0]
	return i, nil
}

// prepareMulti computes a call's key and cost under every policy.
func (i *Interceptor) prepareMulti(ctx context.Context, method string) ([]string, []int64, error) {
	keys := make([]string, len(i.multi.keys))
	for n, k := range i.multi.keys {
		key, err := i.keyOf(ctx, method, k)
		if err != nil {
			return nil, nil, err
		}
		keys[n] = key
	}
	cost, err := i.costOf(ctx, method)
	if err != nil {
		return nil, nil, err
	}
	costs := make([]int64, len(keys))
	for n, f := range i.multi.costs {
		costs[n] = cost
		if f != nil {
			if costs[n], err = i.costWith(ctx, method, f); err != nil {
				return nil, nil, err
			}
		}
	}
	return keys, costs, nil
}

// decideMulti is decide under every policy (see NewMultiInterceptor). With
// held (one element per policy) it reserves, and keeps what each admitted
// there.
func (i *Interceptor) decideMulti(ctx context.Context, keys []string, costs []int64, held []adapter.Held) (metadata.MD, error) {
	p := i.multi
	n := p.m.Len()
	var ds [MaxPolicies]engine.Decision
	var have [MaxPolicies]bool
	var v adapter.Verdict
	if held != nil {
		var ns [MaxPolicies]int64 // an estimate of 0 reserves 1 where settled; hold keeps the estimates
		for j := range n {
			ns[j] = adapter.Reserved(costs[j], i.settle&(1<<j) != 0)
		}
		costs = ns[:n]
		v = p.m.Reserve(ctx, keys, costs, i.cfg.style != 0, ds[:n], have[:n], held)
	} else {
		v = p.m.Decide(ctx, keys, costs, i.cfg.style != 0, ds[:n], have[:n])
	}
	if v.Gone != nil {
		i.counts.Canceled.Add(1)
		return nil, status.FromContextError(v.Gone).Err()
	}
	var md metadata.MD
	for j := range n {
		if have[j] && j != v.At && !adapter.Quiet(i.cfg.below, ds[j]) {
			md = i.md(md, p.fields[j], ds[j], p.fields[j].AdmittedResetAt(v.Now, ds[j].Remaining))
		}
	}
	switch {
	case v.At < 0 && v.Failed:
		i.counts.Errors.Add(1)
		return md, nil
	case v.At < 0:
		i.counts.Allowed.Add(1)
		return md, nil
	case v.Failure && i.cfg.dryRun:
		i.counts.Errors.Add(1)
		return md, nil
	case v.Failure:
		i.counts.Errors.Add(1)
		return md, withRetry(codes.Unavailable, "grpclimit: rate limiter unavailable", ds[v.At].RetryAfter)
	}
	return i.refuse(md, p.fields[v.At], ds[v.At], costs[v.At])
}
