package engine_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

type m13Key struct {
	ev     map[int64]int64 // effective epoch (log: time) -> live units
	newest int64           // epoch (log: time)
	live   bool
	gen    int
	limit  int64
}

type m13 struct {
	kl   int64 // KeyLimit's answer (0: default)
	alg  engine.Algorithm
	L    int64
	W, w int64
	N    int64
	k    *m13Key
}

func newM13(c engine.Config) *m13 {
	m := &m13{alg: c.Algorithm, L: c.Limit, W: int64(c.Window), k: &m13Key{ev: map[int64]int64{}}}
	switch c.Algorithm {
	case engine.FixedWindow:
		m.w, m.N = m.W, 0
	case engine.SlidingLog:
		m.w, m.N = 1, 0
	default:
		m.N = int64(c.SubWindows)
		if m.N == 0 {
			m.N = 10
		}
		m.w = m.W / m.N
	}
	return m
}

func (m *m13) lim() int64 {
	if !m.k.live {
		if m.kl != 0 {
			return m.kl
		}
		return m.L
	}
	if m.k.limit != 0 {
		return m.k.limit
	}
	return m.L
}

// estimate at effective time t (num/den).
func (m *m13) est(t int64) (*big.Int, *big.Int) {
	if m.alg == engine.SlidingLog {
		var s int64
		for at, n := range m.k.ev {
			if at > t-m.W && at <= t {
				s += n
			}
		}
		return big.NewInt(s), big.NewInt(1)
	}
	e, off := t/m.w, t%m.w
	var full, old int64
	for x, n := range m.k.ev {
		switch {
		case m.alg == engine.FixedWindow:
			if x == e {
				full += n
			}
		case m.alg == engine.SlidingWindowStrict:
			if x >= e-m.N && x <= e {
				full += n
			}
		case x == e-m.N:
			old += n
		case x > e-m.N && x <= e:
			full += n
		}
	}
	if m.alg != engine.SlidingWindow {
		return big.NewInt(full), big.NewInt(1)
	}
	num := new(big.Int).Mul(big.NewInt(full), big.NewInt(m.w))
	num.Add(num, new(big.Int).Mul(big.NewInt(old), big.NewInt(m.w-off)))
	return num, big.NewInt(m.w)
}

func (m *m13) remaining(t int64) int64 {
	num, den := m.est(t)
	room := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(m.lim()), den), num)
	if room.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(room, den).Int64()
}

func (m *m13) epoch(t int64) int64 {
	if m.alg == engine.SlidingLog {
		return t
	}
	return t / m.w
}

type m13Res struct {
	gen       int
	e         int64 // epoch (log: time)
	n         int64
	cancelled bool
}

// touch moves the key's time (creating it), handling the far-writer
// retirement of a counter ring.
func (m *m13) touch(t int64) {
	k := m.k
	if !k.live {
		k.live = true
		k.newest = m.epoch(t)
		k.limit = m.kl
		return
	}
	ep := m.epoch(t)
	if m.alg != engine.SlidingLog && ep-k.newest >= 1<<21 {
		// retired and replaced; units all outside the window anyway
		k.gen++
		k.ev = map[int64]int64{}
		k.limit = m.kl
	}
	k.newest = max(k.newest, ep)
}

func (m *m13) eff(t int64) int64 {
	k := m.k
	if k.live && m.epoch(t) < k.newest {
		if m.alg == engine.SlidingLog {
			return k.newest
		}
		return k.newest * m.w
	}
	return t
}

func (m *m13) reserve(n, t int64) (engine.Decision, m13Res) {
	d := engine.Decision{Limit: m.lim()}
	if n <= 0 || n > m.lim() {
		te := m.eff(t)
		if m.k.live {
			d.Remaining = m.remaining(te)
		} else {
			d.Remaining = m.lim()
		}
		d.Allowed = n == 0
		return d, m13Res{}
	}
	m.touch(t)
	te := m.eff(t)
	d.Limit = m.lim()
	num, den := m.est(te)
	num.Add(num, new(big.Int).Mul(big.NewInt(n), den))
	if num.Cmp(new(big.Int).Mul(big.NewInt(m.lim()), den)) <= 0 {
		m.k.ev[m.epoch(te)] += n
		d.Allowed = true
		d.Remaining = m.remaining(te)
		return d, m13Res{gen: m.k.gen, e: m.epoch(te), n: n}
	}
	d.Remaining = m.remaining(te)
	return d, m13Res{}
}

func (m *m13) cancel(r *m13Res) bool {
	if r.n == 0 || r.cancelled || r.gen != m.k.gen || !m.k.live {
		return false
	}
	k := m.k
	ok := false
	switch m.alg {
	case engine.SlidingLog:
		ok = r.e > k.newest-m.W
	case engine.FixedWindow:
		ok = r.e == k.newest
	default:
		ok = r.e >= k.newest-m.N
	}
	if !ok {
		return false
	}
	r.cancelled = true
	k.ev[r.e] -= r.n
	if k.ev[r.e] < 0 {
		panic("model below zero")
	}
	return true
}

func TestReserveCancelMatchesModel(t *testing.T) {
	algs := []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog}
	seeds := scaled(40, 300)
	if s := os.Getenv("ADV13_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		seeds = min(seeds, 50)
	}
	for _, alg := range algs {
		for _, N := range []int{1, 2, 3, 10} {
			for seed := 0; seed < seeds; seed++ {
				if err := runM13(alg, N, uint64(seed)); err != nil {
					t.Fatalf("%v N=%d seed=%d: %v", alg, N, seed, err)
				}
			}
		}
	}
}

func runM13(alg engine.Algorithm, N int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, uint64(alg)*1000+uint64(N)))
	w := int64(1000 + rng.IntN(3)*7)
	L := int64(1 + rng.IntN(12))
	cfg := engine.Config{Limit: L, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, PerKeyLimits: true, MaxLogLimit: 64}
	var kl int64
	useKL := rng.IntN(2) == 0
	if useKL {
		cfg.KeyLimit = func(string) int64 { return kl }
	}
	base := int64(1_700_000_000_000_000_000)
	base -= base % (w * int64(N))
	clk := engine.NewManualClock(time.Unix(0, base))
	cfg.Clock = clk
	useSweep := rng.IntN(2) == 0
	if !useSweep {
		cfg.DisableEviction = true
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	m := newM13(cfg)
	W := int64(cfg.Window)
	setKL := func(v int64) { kl = v; m.kl = v }
	type pair struct {
		r  engine.Reservation
		mr m13Res
	}
	res := make([]*pair, 0, 64)
	now := base
	maxT := base
	floor := base
	var trace []string
	fail := func(f string, a ...any) error {
		tail := trace
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		return fmt.Errorf(f+"\ntrace:\n%s", append(a, fmt.Sprint(tail))...)
	}
	for step := 0; step < 120; step++ {
		// time step
		switch x := rng.IntN(20); {
		case x < 8:
		case x < 13:
			now += rng.Int64N(w)
		case x < 15:
			now += w * int64(rng.IntN(N+2))
		case x < 17:
			now -= rng.Int64N(2 * w) // backwards
			if now < floor {
				now = floor
			}
		case x < 18:
			now += W + rng.Int64N(2*w)
		case x == 18:
			if alg != engine.SlidingLog && cfg.DisableEviction {
				now += w * (1<<21 - int64(rng.IntN(2*N+3)) + int64(N))
			} else {
				now += w * (1 << 20)
			}
		default:
			now = maxT + rng.Int64N(w)
		}
		maxT = max(maxT, now)
		if useKL && rng.IntN(10) == 0 {
			setKL(int64(rng.IntN(14)))
			trace = append(trace, fmt.Sprintf("keylimit -> %d", kl))
		}
		switch op := rng.IntN(10); {
		case op < 5:
			n := int64(rng.IntN(int(L) + 1))
			if rng.IntN(20) == 0 {
				n = m.lim() + 1
			}
			p := &pair{}
			p.r = e.ReserveAt("k", n, time.Unix(0, now))
			d := p.r.Decision()
			md, mr := m.reserve(n, now)
			p.mr = mr
			trace = append(trace, fmt.Sprintf("#%d reserve n=%d t=+%d -> %+v (model %+v)", len(res), n, now-base, d, md))
			if d.Allowed != md.Allowed || d.Remaining != md.Remaining || d.Limit != md.Limit {
				return fail("step %d reserve n=%d at +%d: got %+v, model %+v", step, n, now-base, d, md)
			}
			if !d.Allowed && n > 0 && n <= m.lim() {
				R := int64(d.RetryAfter)
				if R <= 0 || d.RetryAfter == engine.Never {
					return fail("limited denial with RetryAfter %v", d.RetryAfter)
				}
				before := e.AllowAt("k", 0, time.Unix(0, now+R-1)).Remaining
				at := e.AllowAt("k", 0, time.Unix(0, now+R)).Remaining
				if before >= n || at < n {
					return fail("RetryAfter %v not exact: remaining %d just before, %d at (n=%d)", d.RetryAfter, before, at, n)
				}
			}
			if p.r.Units() != mr.n {
				return fail("units %d model %d", p.r.Units(), mr.n)
			}
			if mr.n > 0 {
				want := mr.e * m.w
				if alg == engine.SlidingLog {
					want = mr.e
				}
				if p.r.At().UnixNano() != want {
					return fail("At %d want %d", p.r.At().UnixNano()-base, want-base)
				}
			} else if !p.r.At().IsZero() {
				return fail("At nonzero for unrecorded")
			}
			res = append(res, p)
		case op < 8 && len(res) > 0:
			i := rng.IntN(len(res))
			p := res[i]
			got := p.r.Cancel()
			want := m.cancel(&p.mr)
			trace = append(trace, fmt.Sprintf("cancel #%d (e=%d n=%d gen=%d; key newest=%d gen=%d) -> %v (model %v)", i, p.mr.e, p.mr.n, p.mr.gen, m.k.newest, m.k.gen, got, want))
			if got != want {
				return fail("step %d cancel #%d: got %v, model %v", step, i, got, want)
			}
		case op < 9:
			// peek at now
			d := e.AllowAt("k", 0, time.Unix(0, now))
			md, _ := m.reserve(0, now)
			trace = append(trace, fmt.Sprintf("peek t=+%d -> %+v (model %+v)", now-base, d, md))
			if d.Remaining != md.Remaining {
				return fail("step %d peek at +%d: got %+v model %+v", step, now-base, d, md)
			}
		default:
			if useSweep && rng.IntN(2) == 0 {
				clk.Set(time.Unix(0, maxT))
				before := e.Len()
				n := e.Sweep()
				trace = append(trace, fmt.Sprintf("sweep at +%d: %d (len %d)", maxT-base, n, before))
				if n > 0 {
					m.k.gen++
					m.k.live = false
					m.k.ev = map[int64]int64{}
					m.k.limit = 0
					now = maxT // no request older than the reclamation
					floor = maxT
				}
			} else if m.k.live && rng.IntN(2) == 0 {
				nl := int64(1 + rng.IntN(16))
				if err := e.UpdateLimits(func(string, int64) int64 { return nl }); err != nil {
					return fail("updatelimits: %v", err)
				}
				m.k.limit = nl
				trace = append(trace, fmt.Sprintf("updatelimits %d", nl))
			} else if m.k.live {
				nl := int64(1 + rng.IntN(16))
				if err := e.SetLimitAt("k", nl, time.Unix(0, now)); err != nil {
					return fail("setlimit: %v", err)
				}
				m.touch(now)
				m.k.limit = nl
				trace = append(trace, fmt.Sprintf("setlimit %d at +%d", nl, now-base))
			}
		}
	}
	// final: cancel everything, then a sequential fill reaches the model's capacity
	for i, p := range res {
		got := p.r.Cancel()
		want := m.cancel(&p.mr)
		if got != want {
			return fail("final cancel #%d: got %v, model %v", i, got, want)
		}
	}
	d := e.AllowAt("k", 0, time.Unix(0, now))
	md, _ := m.reserve(0, now)
	if d.Remaining != md.Remaining {
		return fail("final peek: got %+v model %+v", d, md)
	}
	return nil
}
