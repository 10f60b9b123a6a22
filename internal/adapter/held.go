package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// SettleFunc settles a remote limiter's reservation once its work is done:
// to actual ≥ 0 units, 0 giving every unit back (httplimit.SettleFunc and
// grpclimit.SettleFunc are this type). It is called at most once.
type SettleFunc = func(ctx context.Context, actual int64) (engine.Decision, error)

// reservingLimiter is the shape of httplimit.ReservingLimiter and
// grpclimit.ReservingLimiter: a remote limiter (redisstore, once it can)
// that reserves units and settles them after the handler.
type reservingLimiter = interface {
	ReserveN(ctx context.Context, key string, n int64) (engine.Decision, SettleFunc, error)
}

// Held is what a request holds of one limiter after its admission: units
// to give back (in flight) or settle (a reported cost) once its handler
// has run. The zero Held holds nothing; settling it does nothing.
type Held struct {
	res    engine.Reservation // an engine's
	remote SettleFunc         // a remote limiter's; nil otherwise
}

// Settle settles h to actual ≥ 0 units: 0 gives every unit back. An
// engine's refusal (ErrDebtFull, a debt past MaxLimit) or a remote
// limiter's failure is returned; h's units then stay as reserved. A remote
// limiter's settle runs on ctx without its cancellation: the request's
// context may be done by then (a client that left), and the units are
// owed all the same.
func (h *Held) Settle(ctx context.Context, actual int64) error {
	if h.remote != nil {
		f := h.remote
		h.remote = nil
		_, err := f(context.WithoutCancel(ctx), actual)
		return err
	}
	if h.res.Units() == 0 {
		return nil // nothing held (a settled policy reserves at least 1: Reserved)
	}
	_, err := h.res.Settle(actual)
	if errors.Is(err, engine.ErrSettled) {
		return nil // settled already: once only
	}
	return err
}

// Units returns the units h holds of an engine, or −1 for a remote
// limiter's reservation (the adapter does not see them), or 0.
func (h *Held) Units() int64 {
	if h.remote != nil {
		return -1
	}
	return h.res.Units()
}

// CanReserve reports whether b can hold units for a request and settle
// them later: an *engine.Engine, or a ReservingLimiter.
func (b *Backend) CanReserve() bool { return b.eng != nil || b.reserving != nil }

// Reserve is AllowN that keeps what it admitted in a Held, when b can
// reserve (else the Held is empty, and the admission stays). A failure
// policy's admission (err != nil, d.Allowed) holds what the limiter says
// it holds: nothing for most (a nil SettleFunc), a local reservation for
// redisstore's FallbackLocal, which its SettleFunc gives back there.
func (b *Backend) Reserve(ctx context.Context, key string, n int64) (engine.Decision, Held, error) {
	switch {
	case b.eng != nil:
		r := b.eng.Reserve(key, n)
		return r.Decision(), Held{res: r}, nil
	case b.reserving != nil:
		d, settle, err := b.reserving.ReserveN(ctx, key, n)
		if !d.Allowed {
			settle = nil // a refusal holds nothing
		}
		return d, Held{remote: settle}, err
	}
	d, err := b.AllowN(ctx, key, n)
	return d, Held{}, err
}

// Reserved is what the adapters reserve for a request whose estimated cost
// is cost, under a policy that settles (WithSettle, Policy.Settle) or not:
// the cost, but at least 1 when settled. An estimate of 0 is then a check
// that one unit fits, held through the handler and settled like any other
// (to the report, else to the estimate 0): a request whose actual cost is
// unknown must wait out a debt as a one-unit request does, where a
// reservation of 0 units would always be admitted, and the unit held makes
// the check part of the admission, so that concurrent requests cannot all
// pass one free unit. A policy that does not settle reserves the cost: a
// cost of 0 is a free request.
func Reserved(cost int64, settled bool) int64 {
	if settled && cost == 0 {
		return 1
	}
	return cost
}

// CheckHold is the construction check of WithInFlight and WithSettle
// (named by option) on limiter l, whose Backend is b: b must be able to
// reserve, and for WithInFlight an engine must not count in fixed windows,
// which would drop every request in flight at each window's end.
func CheckHold(option string, l any, b Backend) error {
	if !b.CanReserve() {
		return fmt.Errorf("%s needs a limiter that can give units back or settle them after the handler: an *engine.Engine, or a ReservingLimiter (ReserveN); %T is neither", option, l)
	}
	if c, ok := l.(interface{ CanReserve() error }); ok && !IsNil(l) {
		// A limiter that has ReserveN but cannot use it in its mode
		// (redisstore's hybrid limiter) says so at construction.
		if err := c.CanReserve(); err != nil {
			return fmt.Errorf("%s: %w", option, err)
		}
	}
	if c, ok := l.(Configured); ok && option == "WithInFlight" && !IsNil(l) {
		if alg := c.Config().Algorithm; alg == engine.FixedWindow {
			return fmt.Errorf("WithInFlight: the limiter's Algorithm is %v, whose window boundary drops every unit in flight at once; use SlidingWindowStrict (a unit counts in full for Window, plus up to one sub-window) or SlidingLog (exactly Window)", alg)
		} else if alg == engine.TokenBucket {
			return fmt.Errorf("WithInFlight: the limiter's Algorithm is %v, whose units refill with time whatever is in flight, and which gives back only a key's newest booking; use SlidingWindowStrict or SlidingLog to hold units until the handler ends", alg)
		}
	}
	return nil
}

// Reserve is Decide keeping what each policy admitted in held[i], so that
// the adapter can give it back or settle it after the handler (the policies
// whose limiter cannot reserve hold nothing, and keep what they admitted).
// It is all or nothing wherever the limiters can give units back:
//
//   - all engines: each policy is reserved in order at one now, and on the
//     first refusal the ones before it are cancelled (engine.AllowAll's
//     rule, with the reservations kept on admission), also when a
//     Config.KeyLimit panics; ds[i] of an admitted policy is its own
//     reservation's Decision, and with read set, the policies before a
//     refusing one are read again after their cancel.
//   - otherwise in order, as Decide; on a refusal, the policies before it
//     that hold a reservation give it back (settle to 0, on ctx without
//     its cancellation), the others keep what they admitted.
func (m *Multi) Reserve(ctx context.Context, keys []string, ns []int64, read bool, ds []engine.Decision, have []bool, held []Held) Verdict {
	if m.engines != nil {
		return m.reserveAll(keys, ns, read, ds, have, held)
	}
	// Until the policies are decided, a panic (a limiter's bug, a
	// Config.KeyLimit's) gives back what the policies before it hold, as
	// a refusal does, and goes on: held is all zero on entry, and only
	// the policies asked hold anything.
	v, done := Verdict{At: -1}, false
	defer func() {
		switch {
		case !done:
			release(ctx, held)
		case v.At >= 0:
			release(ctx, held[:v.At])
		}
	}()
	v = m.reserveInOrder(ctx, keys, ns, ds, have, held)
	done = true
	return v
}

// reserveInOrder is Reserve's ordered path, up to the first policy that
// does not admit (Verdict.At), which Reserve's caller releases.
func (m *Multi) reserveInOrder(ctx context.Context, keys []string, ns []int64, ds []engine.Decision, have []bool, held []Held) Verdict {
	v := Verdict{At: -1}
	for i := range m.backends {
		d, h, err := m.backends[i].Reserve(ctx, keys[i], ns[i])
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
			held[i] = h // a failure policy's admission may hold units (Backend.Reserve)
			continue
		}
		ds[i], have[i], held[i] = d, true, h
		if Classify(d, ns[i]) != Admitted {
			v.At = i
			return v
		}
	}
	return v
}

// release gives back what every Held of hs holds, the last first: each
// give-back runs even if one before it panics (a SettleFunc's bug), and
// the panic goes on after them.
func release(ctx context.Context, hs []Held) {
	each(len(hs), func(k int) {
		j := len(hs) - 1 - k
		h := hs[j]
		hs[j] = Held{}
		_ = h.Settle(ctx, 0) // a failure leaves the units to their window, as a refused cancel does
	})
}

// each calls f(0) … f(n−1) in order, each one even if an earlier one
// panicked: a deferred call runs the rest, and the panic goes on once
// they have run (a later panic replaces it, as Go's deferred calls do).
// n ≤ MaxPolicies, so the recursion is shallow.
func each(n int, f func(i int)) { eachFrom(0, n, f) }

func eachFrom(i, n int, f func(i int)) {
	if i >= n {
		return
	}
	defer eachFrom(i+1, n, f)
	f(i)
}

func (m *Multi) reserveAll(keys []string, ns []int64, read bool, ds []engine.Decision, have []bool, held []Held) Verdict {
	var now time.Time
	if m.clk != nil {
		now = time.Unix(0, m.clk.UnixNano())
	} else {
		now = time.Now()
	}
	// kept counts the reservations admitted so far; until every policy
	// has admitted they are cancelled, on a refusal and on a panic alike.
	kept := 0
	defer func() {
		for j := kept - 1; j >= 0; j-- {
			held[j].res.Cancel()
			held[j] = Held{}
		}
	}()
	at := -1
	for i, e := range m.engines {
		r := e.ReserveAt(keys[i], ns[i], now)
		ds[i], have[i] = r.Decision(), true
		if Classify(r.Decision(), ns[i]) != Admitted {
			at = i
			break
		}
		held[i] = Held{res: r}
		kept = i + 1
	}
	if at < 0 {
		kept = 0 // all admitted: every reservation stands
		return Verdict{At: -1, Now: now.UnixNano()}
	}
	for j := kept - 1; j >= 0; j-- {
		held[j].res.Cancel()
		held[j] = Held{}
		have[j] = read
		if read {
			ds[j] = m.engines[j].AllowAt(keys[j], 0, now)
		}
	}
	kept = 0
	return Verdict{At: at, Now: now.UnixNano()}
}

// Finish ends what a request held once its handler has returned or
// panicked. Policy i (held[i]) is in flight when bit i of inFlight is
// set: its units go back, unless keep is set (a hijacked connection, which
// its lease ends). It is settled when bit i of settle is set, to the cost
// the handler reported in cell (cell may be nil), else to its estimate
// costs[i], when that differs from what it reserved (Reserved(costs[i])). The request's context may be done by then (a client
// that left): Held.Settle settles without its cancellation. It reports
// whether the limiter refused or failed any of them (Stats.SettleErrors
// counts the request once, as every counter does, however many of its
// policies failed); their units stay as reserved.
func Finish(ctx context.Context, held []Held, inFlight, settle uint8, keep bool, cell *Reported, costs []int64) (failed bool) {
	var actual int64
	reported := false
	if cell != nil {
		actual, reported = cell.Get()
	}
	// Each policy's give-back or settle runs even if one before it
	// panics (a SettleFunc's bug); the panic goes on after them.
	each(len(held), func(i int) {
		var err error
		switch {
		case inFlight&(1<<i) != 0:
			if !keep {
				err = held[i].Settle(ctx, 0)
			}
		case settle&(1<<i) != 0:
			target := costs[i] // no report: the estimate stays
			if reported {
				target = actual
			}
			if target != Reserved(costs[i], true) {
				err = held[i].Settle(ctx, target)
			}
		}
		if err != nil {
			failed = true
		}
	})
	return failed
}
