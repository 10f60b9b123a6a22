package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// MaxPolicies is the most policies NewMulti takes: 8, so that a
// request's keys and decisions, and engine.AllowAll's reservations, live
// on the stack.
const MaxPolicies = 8

var (
	_ [MaxPolicies - adapter.MaxPolicies]struct{}
	_ [adapter.MaxPolicies - MaxPolicies]struct{}
)

// Policy is one named quota of a Middleware built by NewMulti, a policy in
// the RateLimit-Policy sense: a limiter, the key it counts requests by,
// and the name and window of its list member in RateLimit-Policy and
// RateLimit, with WithPolicyName's rules.
type Policy struct {
	Name    string        // 1 … 64 printable ASCII characters, distinct within a Middleware
	Limiter any           // a Limiter or a ContextLimiter
	Key     Key           // the zero Key means KeyByIP(64)
	Window  time.Duration // 0 takes the limiter's (see WithPolicyName)
	// Cost is this policy's cost of a request (nil: WithCost's, or 1),
	// with WithCost's rules: requests per minute beside tokens per
	// minute, say, or 1 per request in flight beside a rate in bytes.
	Cost func(*http.Request) int64
	// InFlight puts this policy's limit on requests in flight, as
	// WithInFlight does for every policy: its units are given back when
	// the handler returns (a per-tenant concurrency limit beside a per-IP
	// rate, say). Its limiter must be able to hold units.
	InFlight bool
	// Settle settles this policy's cost, an estimate, to the cost the
	// handler reports with ReportCost, as WithSettle does for every
	// policy not in flight. Its limiter must be able to hold units, and a
	// policy cannot be both in flight and settled.
	Settle bool
}

// multi holds the policies of a Middleware built by NewMulti.
type multi struct {
	m      *adapter.Multi
	keys   []Key
	costs  []func(*http.Request) int64 // Policy.Cost; nil entries take WithCost's
	fields []*adapter.Fields
}

// NewMulti returns a Middleware that admits a request only if every
// policy admits it (per IP and per tenant in one middleware, say), and
// writes one RateLimit-Policy and RateLimit list member per policy, in
// order. 1 … MaxPolicies policies with distinct names; every mistake is an
// error naming the policy.
//
// Over engines the decision is all or nothing (engine.AllowAll, at one
// time read from the first policy's engine): a refusal charges none of
// the others. Otherwise (a *redisstore.Limiter among them) the policies
// are asked in order and the first that does not admit decides: those
// before it keep what they admitted (a ReservingLimiter gives held units
// back), those after it are not asked. A failed backend follows its
// failure policy: a fail-open admission goes on with no list member, a
// refusal answers 503 (Refusal.Err is ErrPolicyFailed).
//
// opts are NewMiddleware's, except WithKey and WithPolicyName, which are
// per policy; WithCost applies to every policy without a Cost,
// WithInFlight and WithSettle to every policy (docs/http.md, "Several
// limits in one middleware").
func NewMulti(policies []Policy, opts ...Option) (*Middleware, error) {
	m := &Middleware{cfg: defaultConfig()}
	errs := adapter.ApplyOptions("httplimit: ", "NewMulti", &m.cfg, opts)
	if m.cfg.keySet || m.cfg.policySet {
		errs = append(errs, errors.New("httplimit: NewMulti: WithKey and WithPolicyName are given per policy (Policy.Key, Policy.Name, Policy.Window)"))
	}
	if m.cfg.inFlight && m.cfg.settle {
		errs = append(errs, errInFlightSettle)
	}
	mp := &multi{keys: make([]Key, len(policies)), costs: make([]func(*http.Request) int64, len(policies))}
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
		inFlight := p.InFlight || m.cfg.inFlight
		switch {
		case inFlight && p.Settle:
			errs = append(errs, fmt.Errorf("httplimit: NewMulti policy %d (%q): in flight (InFlight or WithInFlight) and Settle: its units are all given back, leaving nothing to settle", n, p.Name))
		case inFlight:
			m.inFlight |= 1 << n
		case p.Settle || m.cfg.settle:
			m.settle |= 1 << n
		}
	}
	m.held = m.inFlight != 0 || m.settle != 0
	check := func(i int, where string, l any) []error {
		b, _ := adapter.NewBackend(l) // BuildMulti has checked it
		return checkHold(where, l, b, m.inFlight&(1<<i) != 0, m.settle&(1<<i) != 0)
	}
	mm, fields, perrs := adapter.BuildMulti("httplimit: ", "NewMulti", specs, check)
	errs = append(errs, perrs...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	mp.m, mp.fields = mm, fields
	m.multi = mp
	m.limiter, m.fields = mm.Backend(0), fields[0]
	return m, nil
}

// serveMulti is serve for a Middleware built by NewMulti.
func (m *Middleware) serveMulti(w http.ResponseWriter, r *http.Request, next http.Handler) {
	p := m.multi
	n := p.m.Len()
	var keys [MaxPolicies]string
	for i, k := range p.keys {
		key, ok := m.key(w, r, next, k)
		if !ok {
			return
		}
		keys[i] = key
	}
	cost, ok := m.cost(w, r, next)
	if !ok {
		return
	}
	var costs [MaxPolicies]int64
	for i, f := range p.costs {
		costs[i] = cost
		if f != nil {
			if costs[i], ok = m.costWith(w, r, next, f); !ok {
				return
			}
		}
	}
	var ds [MaxPolicies]engine.Decision
	var have [MaxPolicies]bool
	var held [MaxPolicies]adapter.Held
	var v adapter.Verdict
	ns := costs // what each policy is asked for
	if m.held {
		for i := range n {
			ns[i] = adapter.Reserved(costs[i], m.settle&(1<<i) != 0)
		}
		v = p.m.Reserve(r.Context(), keys[:n], ns[:n], m.cfg.style != 0, ds[:n], have[:n], held[:n])
	} else {
		v = p.m.Decide(r.Context(), keys[:n], costs[:n], m.cfg.style != 0, ds[:n], have[:n])
	}
	if v.Gone != nil {
		m.callerGone(w, r)
		return
	}
	h := w.Header()
	for i := range n {
		if have[i] && i != v.At {
			m.writeRateHeaders(h, p.fields[i], ds[i], p.fields[i].AdmittedResetAt(v.Now, ds[i].Remaining), false)
		}
	}
	switch {
	case v.At < 0 && v.Failed:
		m.counts.Errors.Add(1)
		m.runHeld(w, r, next, held[:n], costs[:n])
	case v.At < 0:
		m.counts.Allowed.Add(1)
		m.runHeld(w, r, next, held[:n], costs[:n])
	case v.Failure:
		m.limiterFailed(w, r, m.unheld(next), ds[v.At], ErrPolicyFailed)
	default:
		m.refuse(w, r, m.unheld(next), ds[v.At], ns[v.At], p.fields[v.At])
	}
}

// runHeld runs next for an admitted request: with what it holds when the
// middleware holds units, else as it is.
func (m *Middleware) runHeld(w http.ResponseWriter, r *http.Request, next http.Handler, held []adapter.Held, costs []int64) {
	if m.held {
		m.run(w, r, next, held, costs)
		return
	}
	next.ServeHTTP(w, r)
}
