package engine_test

import (
	"math/big"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// model is the package's one reference: an exact sliding log per key,
// sharing no code with the engine. Every count is derived from the log, the
// estimates are exact (big.Int, the weighted one cross-multiplied by the
// sub-window width), and RetryAfter is found by bisection. It serves every
// model-based test: the step and property scripts (decide), reservations,
// Cancel and Settle (reserve, cancel, settle, allowAll), debts (charge),
// per-key limits (setLimit, KeyLimit through keyLimit), Reset (reset), and the audit
// (observe and observeCharge, judged by the exact count in (t−W, t]).
//
// Time is an epoch: t/w, where w is the sub-window width W/N, W itself for
// FixedWindow, and 1 ns for SlidingLog, whose clamp is to the exact newest
// time. A request older than the key's newest epoch is clamped to that
// epoch's start (its effective time).
type model struct {
	alg      engine.Algorithm
	limit    int64 // Config.Limit
	keyLimit int64 // what Config.KeyLimit answers for a new key; 0: Limit
	win      int64 // W, ns
	w        int64 // epoch width, ns
	n        int64 // sub-windows before the current one that count; 0 for FixedWindow and SlidingLog
	keys     map[string]*modelKey
	// claimed: the reservations a Cancel or a Settle has claimed (once
	// each, whatever it then gave back).
	claimed map[modelRes]bool

	// The audit's side: the report the engine must give, and every key
	// that reached rep.WorstWindow.
	rep   engine.AuditReport
	worst map[string]bool
}

// modelEvent is units admitted (or, with debt, charged) at an effective
// time; a Cancel that gives them back sets n to 0, a Settle lowers it (and
// so does the audit's unadmit).
type modelEvent struct {
	t, n int64
	debt bool
}

type modelKey struct {
	log    []modelEvent
	newest int64 // the newest epoch a recording request or SetLimit moved the key to
	judged int64 // the audit: the newest time a decision of the key was judged at
	live   bool
	gen    int   // bumped when the key's state is retired or reclaimed: older reservations cancel nothing
	limit  int64 // the key's own limit; 0: the model's
	// The audit: the units charged in epoch chargedIn, the key's newest
	// judged one then.
	charged, chargedIn int64
}

// retireGap is the epoch jump at which a counter key's state is retired
// and replaced (its ring's tags cannot span it); every unit is outside the
// window by then, so only the key's limit and its reservations notice.
const retireGap = 1 << 21

func newModel(cfg engine.Config) *model {
	m := &model{alg: cfg.Algorithm, limit: cfg.Limit, win: int64(cfg.Window), keys: map[string]*modelKey{}, claimed: map[modelRes]bool{}, rep: engine.AuditReport{Share: cfg.Audit}}
	switch cfg.Algorithm {
	case engine.FixedWindow:
		m.w = m.win
	case engine.SlidingLog:
		m.w = 1
	default:
		m.n = int64(cfg.SubWindows)
		if m.n == 0 {
			m.n = engine.DefaultSubWindows
		}
		m.w = m.win / m.n
	}
	return m
}

func (m *model) key(key string) *modelKey {
	k := m.keys[key]
	if k == nil {
		k = &modelKey{}
		m.keys[key] = k
	}
	return k
}

func (m *model) epoch(t int64) int64 { return t / m.w }

// lim is the limit a decision of k uses.
func (m *model) lim(k *modelKey) int64 {
	switch {
	case k.live && k.limit != 0:
		return k.limit
	case !k.live && m.keyLimit != 0:
		return m.keyLimit
	}
	return m.limit
}

// effective is t clamped to the start of k's newest epoch.
func (m *model) effective(k *modelKey, t int64) int64 {
	if k.live && m.epoch(t) < k.newest {
		return k.newest * m.w
	}
	return t
}

// touch is activity of k at t (a recording request, SetLimit): it creates
// the key there, or moves its time there, never backwards.
func (m *model) touch(k *modelKey, t int64) {
	ep := m.epoch(t)
	switch {
	case !k.live:
		k.live, k.newest, k.limit = true, ep, m.keyLimit
	case m.alg != engine.SlidingLog && ep-k.newest >= retireGap:
		k.gen++
		k.log, k.limit = nil, m.keyLimit
	}
	k.newest = max(k.newest, ep)
}

// reclaim is the sweeper removing k.
func (m *model) reclaim(k *modelKey) {
	k.gen++
	k.live, k.log, k.limit = false, nil, 0
}

// reset is Engine.Reset(key): a live key's counts go, its reservations
// cancel nothing (a new generation), its limit and its newest epoch stay
// (SlidingLog: the newest time moves on by 1 ns).
func (m *model) reset(key string) bool {
	k := m.keys[key]
	if k == nil || !k.live {
		return false
	}
	k.gen++
	k.log = nil
	if m.alg == engine.SlidingLog {
		k.newest++
	}
	return true
}

// setLimit is SetLimitAt(key, l, t).
func (m *model) setLimit(key string, l, t int64) {
	k := m.key(key)
	m.touch(k, t)
	k.limit = l
}

// estimate is the algorithm's count of k at t, as num/den.
func (m *model) estimate(k *modelKey, t int64) (num, den *big.Int) {
	if m.alg == engine.SlidingLog {
		return big.NewInt(m.count(k, t)), big.NewInt(1)
	}
	e, off := m.epoch(t), t%m.w
	var full, old int64 // old: the weighted oldest sub-window
	for _, ev := range k.log {
		x := m.epoch(ev.t)
		switch {
		case m.alg == engine.SlidingWindow && x == e-m.n:
			old += ev.n
		case x >= e-m.n && x <= e && (m.alg != engine.SlidingWindow || x > e-m.n):
			full += ev.n // Strict: the N+1 newest sub-windows; Fixed (n = 0): the current one
		}
	}
	if m.alg != engine.SlidingWindow {
		return big.NewInt(full), big.NewInt(1)
	}
	num = new(big.Int).Mul(big.NewInt(full), big.NewInt(m.w))
	num.Add(num, new(big.Int).Mul(big.NewInt(old), big.NewInt(m.w-off)))
	return num, big.NewInt(m.w)
}

// fits reports whether n more units fit k's estimate at t under limit.
func (m *model) fits(k *modelKey, t, n, limit int64) bool {
	num, den := m.estimate(k, t)
	num.Add(num, new(big.Int).Mul(big.NewInt(n), den))
	return num.Cmp(new(big.Int).Mul(big.NewInt(limit), den)) <= 0
}

// remaining is floor(limit − estimate), at least 0.
func (m *model) remaining(k *modelKey, t, limit int64) int64 {
	num, den := m.estimate(k, t)
	room := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(limit), den), num)
	if room.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(room, den).Int64()
}

// count is the exact number of units k's log holds in (t−W, t].
func (m *model) count(k *modelKey, t int64) int64 {
	var s int64
	for _, ev := range k.log {
		if ev.t > t-m.win && ev.t <= t {
			s += ev.n
		}
	}
	return s
}

// maxInWindow is the most admitted units k's log holds in any window
// (t−W, t]: the true count an exact sliding log would see, less debts
// (charged units), which may take a window past any bound.
func (m *model) maxInWindow(k *modelKey) int64 {
	var best int64
	for _, end := range k.log {
		var s int64
		for _, ev := range k.log {
			if !ev.debt && ev.t > end.t-m.win && ev.t <= end.t {
				s += ev.n
			}
		}
		best = max(best, s)
	}
	return best
}

// modelRes is a reservation in the model: its key, the index of its event
// in the key's log (−1: it recorded nothing), the key's generation, and
// its units.
type modelRes struct {
	key string
	ev  int
	gen int
	n   int64
}

// decide is AllowAt(key, n, t).
func (m *model) decide(key string, n, t int64) engine.Decision {
	d, _ := m.reserve(key, n, t)
	return d
}

// decideAt is decide at a time.Time.
func (m *model) decideAt(key string, n int64, now time.Time) engine.Decision {
	return m.decide(key, n, now.UnixNano())
}

// reserve is ReserveAt(key, n, t).
func (m *model) reserve(key string, n, t int64) (engine.Decision, modelRes) {
	k := m.key(key)
	res := modelRes{key: key, ev: -1}
	lim := m.lim(k)
	d := engine.Decision{Limit: lim}
	if n <= 0 || n > lim {
		d.Remaining = m.remaining(k, m.effective(k, t), lim)
		if d.Allowed = n == 0; !d.Allowed {
			d.RetryAfter = engine.Never
		}
		return d, res
	}
	m.touch(k, t)
	te := m.effective(k, t)
	lim = m.lim(k)
	if m.fits(k, te, n, lim) {
		k.log = append(k.log, modelEvent{t: te, n: n})
		res.ev, res.gen, res.n = len(k.log)-1, k.gen, n
		return engine.Decision{Allowed: true, Limit: lim, Remaining: m.remaining(k, te, lim)}, res
	}
	return m.denial(k, t, te, n, lim), res
}

// peek is what n ≥ 1 units of key would get at t, recording nothing: the
// Decision Settle and ChargeAt return (for one unit).
func (m *model) peek(key string, n, t int64) engine.Decision {
	k := m.key(key)
	lim := m.lim(k)
	te := m.effective(k, t)
	if m.fits(k, te, n, lim) {
		return engine.Decision{Allowed: true, Limit: lim, Remaining: m.remaining(k, te, lim)}
	}
	return m.denial(k, t, te, n, lim)
}

// denial is the Decision of n units of k refused at t, effective time te.
func (m *model) denial(k *modelKey, t, te, n, lim int64) engine.Decision {
	d := engine.Decision{Limit: lim, Remaining: m.remaining(k, te, lim)}
	// The estimate never grows without traffic, so the least fitting wait
	// is found by bisection; within W + one epoch it always fits.
	lo, hi := int64(0), m.win+m.w
	for lo < hi {
		mid := lo + (hi-lo)/2
		if m.fits(k, te+mid, n, lim) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	// Counted from t, not from the effective time: a retry at
	// t + RetryAfter is a request at te + lo.
	d.RetryAfter = time.Duration(te + lo - t)
	return d
}

// reserveAt is reserve at a time.Time.
func (m *model) reserveAt(key string, n int64, now time.Time) (engine.Decision, modelRes) {
	return m.reserve(key, n, now.UnixNano())
}

// cancel is Reservation.Cancel: the units go back if the reservation was
// not cancelled or settled before, the key was not retired or reclaimed
// since, and their epoch is still inside the key's window at its newest
// epoch. It claims the reservation whatever it gives back.
func (m *model) cancel(r modelRes) bool {
	if r.ev < 0 || m.claimed[r] {
		return false
	}
	m.claimed[r] = true
	return m.giveBack(r, r.n)
}

// settle is Reservation.SettleAt(actual, t) on a reservation with units
// that nothing claimed yet (the caller checks the errors): fewer units go
// back as Cancel's would, more are charged at t. It returns the Decision
// of one unit at t.
func (m *model) settle(r modelRes, actual, t int64) engine.Decision {
	m.claimed[r] = true
	switch {
	case actual < r.n:
		m.giveBack(r, r.n-actual)
	case actual > r.n:
		m.charge(r.key, actual-r.n, t)
	}
	return m.peek(r.key, 1, t)
}

// charge is ChargeAt(key, n, t) for n ≥ 0: n units at the key's effective
// time whatever the limit. It returns the Decision of one unit at t.
func (m *model) charge(key string, n, t int64) engine.Decision {
	if n > 0 {
		k := m.key(key)
		m.touch(k, t)
		k.log = append(k.log, modelEvent{t: m.effective(k, t), n: n, debt: true})
	}
	return m.peek(key, 1, t)
}

// chargeFull reports whether ChargeAt(key, n, t), n ≥ 1, is refused with
// ErrDebtFull (and changes nothing): a counter key's current sub-window
// would pass MaxLimit, a log key's window would hold more than maxLog
// units (Config.MaxLogLimit). A key that is absent, or that t retires, is
// empty.
func (m *model) chargeFull(key string, n, t, maxLog int64) bool {
	k := m.keys[key]
	if k == nil || !k.live || m.alg != engine.SlidingLog && m.epoch(t)-k.newest >= retireGap {
		if m.alg == engine.SlidingLog {
			return n > maxLog
		}
		return n > engine.MaxLimit
	}
	te := m.effective(k, t)
	if m.alg == engine.SlidingLog {
		return m.count(k, te)+n > maxLog
	}
	var in int64
	for _, ev := range k.log {
		if m.epoch(ev.t) == m.epoch(te) {
			in += ev.n
		}
	}
	return in+n > engine.MaxLimit
}

// giveBack takes units of reservation r out of its event, under Cancel's
// rule.
func (m *model) giveBack(r modelRes, units int64) bool {
	if !m.refundable(r) {
		return false
	}
	m.keys[r.key].log[r.ev].n -= units
	return true
}

// refundable reports whether r's units still count, so that Cancel's rule
// lets them go back: the key was not retired or reclaimed since, and
// their epoch is inside the key's window at its newest epoch.
func (m *model) refundable(r modelRes) bool {
	k := m.keys[r.key]
	if k == nil || !k.live || r.gen != k.gen {
		return false
	}
	ev := k.log[r.ev]
	if m.alg == engine.SlidingLog {
		return ev.t > k.newest-m.win
	}
	return m.epoch(ev.t) >= k.newest-m.n
}

// allowAll is AllowAll: reserve in order; on a denial cancel the earlier
// ones and return its index; else −1 and the least Remaining.
func (m *model) allowAll(now time.Time, keys []string, ns []int64) (int, engine.Decision) {
	var held []modelRes
	best := engine.Decision{Allowed: true, Remaining: -1}
	for i, k := range keys {
		d, r := m.reserveAt(k, ns[i], now)
		if !d.Allowed {
			for _, h := range held {
				m.cancel(h)
			}
			return i, d
		}
		held = append(held, r)
		if best.Remaining < 0 || d.Remaining < best.Remaining {
			best = d
		}
	}
	return -1, best
}
