package adapter

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// MaxPolicies is the most policies one middleware or interceptor decides
// together: the requests of engine.AllowAll and the decisions of a
// request live in arrays on the stack.
const MaxPolicies = 8

// Multi decides a request under several policies, each a Backend with its
// own key. The zero Multi is not usable; build one with NewMulti.
type Multi struct {
	backends []Backend
	engines  []*engine.Engine // every backend's engine, when all are engines; else nil
	clk      engine.Clock     // the first engine's Config().Clock, or nil for the wall clock
}

// NewMulti returns the Multi of backends (1 … MaxPolicies of them).
func NewMulti(backends []Backend) *Multi {
	m := &Multi{backends: backends}
	engines := make([]*engine.Engine, len(backends))
	for i := range backends {
		if engines[i] = backends[i].Engine(); engines[i] == nil {
			return m
		}
	}
	m.engines = engines
	m.clk = engines[0].Config().Clock
	return m
}

// AllOrNothing reports whether every backend is an *engine.Engine, so that
// Decide charges all policies or none.
func (m *Multi) AllOrNothing() bool { return m.engines != nil }

// Len returns the number of policies.
func (m *Multi) Len() int { return len(m.backends) }

// Verdict is the outcome of Multi.Decide.
type Verdict struct {
	At      int  // −1: every policy admitted; else the policy that refused
	Failure bool // At refused through its backend's failure policy (the backend failed), not by a decision
	Failed  bool // a backend failed on the way; its failure policy admitted or (Failure) refused
	// Gone, when not nil, is the context error of a caller who had left
	// (CallerGone) when At's backend failed: no admission, whatever its
	// policy said.
	Gone error
	// Now is the time (Unix ns) every engine decided at, when all the
	// policies are engines; 0 otherwise. The admitted t= of a FixedWindow
	// policy is counted from it (Fields.AdmittedResetAt), so that it names
	// the end of the window the units were counted in.
	Now int64
}

// Decide asks every policy i for ns[i] units of keys[i], and fills ds[i]
// with policy i's Decision where have[i] is set (for its rate-limit
// fields):
//
//   - all engines: engine.AllowAll at one now (the first engine's clock,
//     else the wall clock), so that a refusal by one policy leaves the
//     others uncharged. With read set, each policy's state after the
//     decision is read without a charge (AllowAt with n = 0) for the
//     fields of the policies AllowAll does not report; a policy after the
//     refusing one is not read, as it was never asked (reading would
//     create its key).
//   - otherwise, in order, stopping at the first policy that does not
//     admit. A policy before it keeps the units it admitted: a shared
//     limiter's admission (Redis) cannot be taken back. A policy after it
//     is not asked. A backend failure follows its failure policy (a
//     fail-open admission goes on to the next policy, with no fields for
//     the failed one), unless the caller has gone (Gone).
//
// keys, ns, ds and have hold one element per policy.
func (m *Multi) Decide(ctx context.Context, keys []string, ns []int64, read bool, ds []engine.Decision, have []bool) Verdict {
	if m.engines != nil {
		return m.decideAll(keys, ns, read, ds, have)
	}
	v := Verdict{At: -1}
	for i := range m.backends {
		d, err := m.backends[i].AllowN(ctx, keys[i], ns[i])
		if err != nil {
			if gone := CallerGone(ctx, err); gone != nil {
				return Verdict{At: i, Gone: gone}
			}
			v.Failed = true
			if !d.Allowed {
				ds[i] = d
				v.At, v.Failure = i, true
				return v
			}
			continue
		}
		ds[i], have[i] = d, true
		if Classify(d, ns[i]) != Admitted {
			v.At = i
			return v
		}
	}
	return v
}

func (m *Multi) decideAll(keys []string, ns []int64, read bool, ds []engine.Decision, have []bool) Verdict {
	var now time.Time
	if m.clk != nil {
		now = time.Unix(0, m.clk.UnixNano())
	} else {
		now = time.Now()
	}
	var reqs [MaxPolicies]engine.Request
	for i, e := range m.engines {
		reqs[i] = engine.Request{Engine: e, Key: keys[i], N: ns[i]}
	}
	at, d := engine.AllowAll(now, reqs[:len(m.engines)]...)
	last := len(m.engines) - 1
	if at >= 0 {
		ds[at], have[at] = d, true
		last = at - 1
	}
	if read {
		for i := 0; i <= last; i++ {
			ds[i], have[i] = m.engines[i].AllowAt(keys[i], 0, now), true
		}
	}
	return Verdict{At: at, Now: now.UnixNano()}
}

// PolicySpec is one policy given to httplimit.NewMulti or
// grpclimit.NewMultiInterceptor: its name, limiter and window, and its
// key's configuration error.
type PolicySpec struct {
	Name    string
	Limiter any
	Window  time.Duration
	KeyErr  error
}

// BuildMulti validates specs (1 … MaxPolicies, distinct names, each a
// limiter with a usable key and WithPolicyName's name and window) and returns
// their Multi and Fields, or the errors, each naming its policy after
// prefix and fn. check, if not nil, adds the caller's own checks of
// policy i's limiter.
func BuildMulti(prefix, fn string, specs []PolicySpec, check func(i int, where string, l any) []error) (*Multi, []*Fields, []error) {
	var errs []error
	if len(specs) == 0 || len(specs) > MaxPolicies {
		errs = append(errs, fmt.Errorf("%s%s: %d policies, want 1 … %d", prefix, fn, len(specs), MaxPolicies))
	}
	var backends []Backend
	var fields []*Fields
	seen := map[string]bool{}
	for i, p := range specs {
		where := fmt.Sprintf("%s policy %d (%q)", fn, i, p.Name)
		b, err := NewBackend(p.Limiter)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", prefix, where, err))
			continue
		}
		if p.KeyErr != nil {
			errs = append(errs, &ConfigError{Prefix: prefix, Where: where, Err: p.KeyErr})
			continue
		}
		f, err := NewFields(prefix, where, p.Limiter, p.Name, p.Window)
		if err != nil {
			errs = append(errs, &ConfigError{Prefix: prefix, Where: where, Err: err})
			continue
		}
		if check != nil {
			errs = append(errs, check(i, where+": ", p.Limiter)...)
		}
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("%s%s: the name is given twice; each policy adds its own list member", prefix, where))
		}
		seen[p.Name] = true
		backends = append(backends, b)
		fields = append(fields, f)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return NewMulti(backends), fields, nil
}

// Backend returns policy i's Backend.
func (m *Multi) Backend(i int) Backend { return m.backends[i] }
