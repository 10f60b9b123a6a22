package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// advRef is an independent exact model (written for this review, sharing
// nothing with reference_test.go): a log of (effective time, n) per key,
// estimates in big.Int cross-multiplied form, RetryAfter by bisection.
type advRef struct {
	alg  engine.Algorithm
	L    int64
	W, w int64
	N    int64
	keys map[string]*advKey
}

type advKey struct {
	ev     [][2]int64 // effective time, n
	newest int64      // newest epoch (log: time)
	live   bool
}

func newAdvRef(c engine.Config) *advRef {
	r := &advRef{alg: c.Algorithm, L: c.Limit, W: int64(c.Window), keys: map[string]*advKey{}}
	switch c.Algorithm {
	case engine.FixedWindow:
		r.w, r.N = r.W, 0
	case engine.SlidingLog:
		r.w, r.N = 1, 0
	default:
		r.N = int64(c.SubWindows)
		if r.N == 0 {
			r.N = 10
		}
		r.w = r.W / r.N
	}
	return r
}

// est returns the estimate at t as num/den (den = w for weighted, else 1).
func (r *advRef) est(k *advKey, t int64) (num *big.Int, den *big.Int) {
	e, off := t/r.w, t%r.w
	switch r.alg {
	case engine.SlidingLog:
		var s int64
		for _, ev := range k.ev {
			if ev[0] > t-r.W && ev[0] <= t {
				s += ev[1]
			}
		}
		return big.NewInt(s), big.NewInt(1)
	}
	// One pass over the events: each lands in the current window's full
	// part, its weighted oldest sub-window, or neither (Fixed: N = 0, one
	// sub-window; Strict: every overlapping sub-window in full).
	var full, old int64
	for _, ev := range k.ev {
		x := ev[0] / r.w
		switch {
		case r.alg == engine.FixedWindow:
			if x == e {
				full += ev[1]
			}
		case r.alg == engine.SlidingWindowStrict:
			if x >= e-r.N && x <= e {
				full += ev[1]
			}
		case x == e-r.N:
			old += ev[1]
		case x > e-r.N && x <= e:
			full += ev[1]
		}
	}
	if r.alg != engine.SlidingWindow {
		return big.NewInt(full), big.NewInt(1)
	}
	num = new(big.Int).Mul(big.NewInt(full), big.NewInt(r.w))
	num.Add(num, new(big.Int).Mul(big.NewInt(old), big.NewInt(r.w-off)))
	return num, big.NewInt(r.w)
}

func (r *advRef) fits(k *advKey, t, n int64) bool {
	num, den := r.est(k, t)
	num.Add(num, new(big.Int).Mul(big.NewInt(n), den))
	return num.Cmp(new(big.Int).Mul(big.NewInt(r.L), den)) <= 0
}

func (r *advRef) remaining(k *advKey, t int64) int64 {
	num, den := r.est(k, t)
	room := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(r.L), den), num)
	if room.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(room, den).Int64()
}

func (r *advRef) epoch(t int64) int64 {
	if r.alg == engine.SlidingLog {
		return t
	}
	return t / r.w
}

// decide returns the decision and the least wait from the caller's own t
// (not the effective time) after which the same request fits.
func (r *advRef) decide(key string, n, t int64) (engine.Decision, int64) {
	k := r.keys[key]
	if k == nil {
		k = &advKey{}
	}
	te := t
	if k.live && r.epoch(t) < k.newest {
		if r.alg == engine.SlidingLog {
			te = k.newest
		} else {
			te = k.newest * r.w
		}
	}
	d := engine.Decision{Limit: r.L}
	if n <= 0 || n > r.L {
		d.Remaining = r.remaining(k, te)
		if n == 0 {
			d.Allowed = true
		} else {
			d.RetryAfter = engine.Never
		}
		return d, 0
	}
	r.keys[key] = k
	k.live = true
	k.newest = max(k.newest, r.epoch(t))
	if r.fits(k, te, n) {
		k.ev = append(k.ev, [2]int64{te, n})
		d.Allowed = true
		d.Remaining = r.remaining(k, te)
		return d, 0
	}
	d.Remaining = r.remaining(k, te)
	search := func(from int64) int64 {
		lo, hi := int64(1), r.W+r.w+(te-from)+1
		for lo < hi {
			mid := lo + (hi-lo)/2
			at := from + mid
			if at < te { // a retry before the effective time is clamped to it
				at = te
			}
			if r.fits(k, at, n) && from+mid >= te || r.fits(k, at, n) && at == te {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
	d.RetryAfter = time.Duration(search(t)) // counted from the caller's t, as the engine does
	return d, search(t)
}

type advCase struct {
	L   int64
	N   int
	w   int64
	alg engine.Algorithm
}

func TestAdvReferenceExtremes(t *testing.T) {
	limits := []int64{1, 2, 3, 7, 1000, engine.MaxLimit, engine.MaxLimit - 1, 1 << 39, 999_999_999_989}
	ns := []int{1, 2, 3, 7, 1000}
	widths := []int64{1, 3, 7, 999_999_937, 1 << 50, 1 << 57}
	rng := rand.New(rand.NewPCG(42, 7))
	seen := 0
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, L := range limits {
			if alg == engine.SlidingLog && L > 10_000 {
				continue
			}
			for _, N := range ns {
				for _, w := range widths {
					if w*int64(N) > int64(engine.MaxWindow) || w > int64(engine.MaxWindow)/int64(N) {
						continue
					}
					if (alg == engine.FixedWindow || alg == engine.SlidingLog) && N != 1 {
						continue
					}
					c := advCase{L, N, w, alg}
					name := fmt.Sprintf("%v/L=%d/N=%d/w=%d", alg, L, N, w)
					for seed := 0; seed < scaled(1, 3); seed++ {
						if err := runAdvScript(c, rng); err != nil {
							t.Errorf("%s: %v", name, err)
							break
						}
						seen++
					}
				}
			}
		}
	}
	t.Logf("%d scripts", seen)
}

func runAdvScript(c advCase, rng *rand.Rand) error {
	cfg := engine.Config{Limit: c.L, Window: time.Duration(c.w * int64(c.N)), SubWindows: c.N, Algorithm: c.alg, DisableEviction: true}
	if c.alg == engine.FixedWindow || c.alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newAdvRef(cfg)
	W := int64(cfg.Window)
	w := W / int64(max(c.N, 1))
	if c.alg == engine.FixedWindow || c.alg == engine.SlidingLog {
		w = W
	}
	// Start somewhere between 1970 and the last few windows before 2262.
	var now int64
	switch rng.IntN(3) {
	case 0:
		now = 1_700_000_000_000_000_000 + rng.Int64N(w)
	case 1:
		now = rng.Int64N(w) // near 1970
	default:
		now = math.MaxInt64 - 6*W - rng.Int64N(w) // near 2262
		if now < 0 {
			now = rng.Int64N(w)
		}
	}
	keys := []string{"a", "b"}
	for i := 0; i < 150; i++ {
		switch rng.IntN(9) {
		case 0, 1:
		case 2:
			now -= rng.Int64N(2 * w)
		case 3:
			now += w
		case 4:
			now += rng.Int64N(w/2 + 1)
		case 5:
			now += W + rng.Int64N(w)
		case 6:
			now += w - 1
		default:
			now += rng.Int64N(w + 1)
		}
		if now < 0 {
			now = 0
		}
		if now > math.MaxInt64-3*W-3*w {
			return nil // stop before the edge of time
		}
		var n int64
		switch rng.IntN(8) {
		case 0:
			n = 0
		case 1:
			n = c.L
		case 2:
			n = c.L - 1
		case 3:
			n = c.L + 1
		case 4:
			n = -1
		case 5:
			n = 1 + rng.Int64N(c.L)
		default:
			n = 1 + rng.Int64N(min(c.L, 3))
		}
		if n == 0 && c.L == 1 {
			n = 1
		}
		key := keys[rng.IntN(2)]
		got := e.AllowAt(key, n, time.Unix(0, now))
		want, _ := ref.decide(key, n, now)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%q, %d, %d)\n got %+v\nwant %+v", i, key, n, now, got, want)
		}
	}
	return nil
}

// Held (so far): the reference comparison with jumps near the tag and
// revive-gap boundaries (2^20, 2^21, 2^23, 2^24 sub-windows, and multiples
// of N+1 that keep hitting one slot), mixed with small steps and steps back.
func TestAdvReferenceTagJumps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, N := range []int{1, 2, 3, 10} {
			if alg == engine.FixedWindow && N != 1 {
				continue
			}
			for _, w := range []int64{1, 7, 1000} {
				for seed := 0; seed < 6; seed++ {
					if err := runAdvJumps(alg, N, w, rng); err != nil {
						t.Fatalf("%v N=%d w=%d: %v", alg, N, w, err)
					}
				}
			}
		}
	}
}

func runAdvJumps(alg engine.Algorithm, N int, w int64, rng *rand.Rand) error {
	cfg := engine.Config{Limit: 3, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, DisableEviction: true}
	if alg == engine.FixedWindow {
		cfg.SubWindows = 0
		cfg.Window = time.Duration(w)
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newAdvRef(cfg)
	slots := int64(N) + 1
	if alg == engine.FixedWindow {
		slots = 1
	}
	jumps := []int64{1 << 20, 1<<20 - 1, 1<<20 + 1, 1<<21 - 1, 1 << 21, 1<<21 + 1, 1 << 23, 1<<24 - 1, 1 << 24, 1<<24 + 1,
		slots << 19, (slots << 20) / slots * slots, ((1 << 21) - 1) / slots * slots, (1 << 24) / slots * slots}
	now := int64(1 << 40)
	for i := 0; i < 300; i++ {
		switch rng.IntN(6) {
		case 0:
			now += jumps[rng.IntN(len(jumps))]*w + rng.Int64N(w)
		case 1:
			now -= rng.Int64N(3 * w)
		default:
			now += rng.Int64N(2 * w)
		}
		now = max(now, 0)
		n := []int64{0, 1, 1, 2, 3, 4}[rng.IntN(6)]
		got := e.AllowAt("k", n, time.Unix(0, now))
		want, _ := ref.decide("k", n, now)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%d, %d)\n got %+v\nwant %+v", i, n, now, got, want)
		}
	}
	return nil
}

// Held (so far): sequential scripts with SetLimit (lower, raise; SlidingLog
// growing its log) interleaved, against the reference with per-key limits.
func TestAdvReferenceWithSetLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, N := range []int{1, 2, 5} {
			for seed := 0; seed < 20; seed++ {
				if err := runAdvSetLimit(alg, N, rng); err != nil {
					t.Fatalf("%v N=%d: %v", alg, N, err)
				}
			}
		}
	}
}

func runAdvSetLimit(alg engine.Algorithm, N int, rng *rand.Rand) error {
	base := int64(1_700_000_000_000_000_000)
	clk := engine.NewManualClock(time.Unix(0, base))
	cfg := engine.Config{Limit: 6, Window: time.Duration(N) * 100 * time.Millisecond, SubWindows: N, Algorithm: alg, DisableEviction: true, Clock: clk, PerKeyLimits: true, MaxLogLimit: 64}
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	refs := map[string]*advRef{} // one reference per key: limits differ
	ref := func(k string) *advRef {
		if refs[k] == nil {
			refs[k] = newAdvRef(cfg)
		}
		return refs[k]
	}
	w := int64(cfg.Window) / int64(max(N, 1))
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		w = int64(cfg.Window)
	}
	now := base
	for i := 0; i < 300; i++ {
		switch rng.IntN(5) {
		case 0:
			now -= rng.Int64N(2 * w)
		case 1:
			now += w - 1
		default:
			now += rng.Int64N(w/2 + 1)
		}
		clk.Set(time.Unix(0, now))
		key := []string{"a", "b"}[rng.IntN(2)]
		r := ref(key)
		if rng.IntN(6) == 0 {
			l := 1 + rng.Int64N(40)
			if err := e.SetLimit(key, l); err != nil {
				return err
			}
			r.L = l
			k := r.keys[key]
			if k == nil {
				k = &advKey{}
				r.keys[key] = k
			}
			// SetLimit is activity at the clock's time: it creates the key
			// there, or moves its time there (never backwards).
			if !k.live || r.epoch(now) > k.newest {
				k.live = true
				k.newest = r.epoch(now)
			}
			continue
		}
		n := []int64{0, 1, 1, 2, 3, r.L, r.L + 1, -1}[rng.IntN(8)]
		got := e.AllowAt(key, n, time.Unix(0, now))
		want, _ := r.decide(key, n, now)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%q, %d, base%+d)\n got %+v\nwant %+v", i, key, n, now-base, got, want)
		}
	}
	return nil
}
