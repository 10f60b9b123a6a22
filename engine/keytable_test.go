package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/shard"
)

// These tests attack the engine's key table (the shard maps and the hints
// in front of them) through the public API alone, and judge every decision
// against an exact model of its own key. Every key has a limit of its own,
// so a decision counted on another key's state, on a reclaimed state or on
// a state that was replaced shows as a wrong Limit or Remaining.

// tableKeys returns keys of lengths 0, 1, 7, 8, 15, 16, 17 and 300, many of
// which differ only in their last byte (or, at 300 bytes, only in a middle
// byte), and, when extra > 0, that many more short numbered keys, so that
// one shard holds enough keys to grow its hints.
func tableKeys(extra int) []string {
	keys := []string{""}
	for j := range 64 {
		keys = append(keys, string(rune(j))[:1]) // "\x00" … "?"
	}
	for _, n := range []int{7, 8, 15, 16, 17} {
		for g := range 4 {
			prefix := strings.Repeat(string(rune('a'+g)), n-1)
			for j := range 40 {
				keys = append(keys, prefix+string(rune('0'+j)))
			}
		}
	}
	for g := range 2 {
		prefix := strings.Repeat(string(rune('x'+g)), 299)
		for j := range 40 {
			keys = append(keys, prefix+string(rune('0'+j)))
		}
	}
	for j := range 40 {
		b := []byte(strings.Repeat("m", 300))
		b[150] = byte('0' + j)
		keys = append(keys, string(b))
	}
	for i := range extra {
		keys = append(keys, fmt.Sprintf("n%05d", i))
	}
	return keys
}

// keyModel is the exact history of one key as a single owner sees it: the
// units admitted (times and counts), its limit, whether that limit is a
// SetLimit override, and when the key was last surely and last possibly
// active (an admission or a limit set surely is; a peek or a denial may
// be).
type keyModel struct {
	base      int64
	limit     int64
	override  bool
	units     []modelUnit
	lastSure  int64 // ns; 0: never
	lastMaybe int64
}

type modelUnit struct{ at, n int64 }

// tableModel holds what the algorithm counts: the sliding log's window
// (t − W, t], or for SlidingWindowStrict every sub-window overlapping it in
// full, the current and N before it.
type tableModel struct {
	alg  engine.Algorithm
	W, w int64
	N    int64
	// capped: Config.MaxKeys is set, so a key the engine may not hold can
	// be refused (ReasonKeysFull); a key it surely holds never is.
	capped bool
}

func (tm tableModel) sum(m *keyModel, t int64) int64 {
	var s int64
	keep := m.units[:0]
	for _, u := range m.units {
		var in bool
		if tm.alg == engine.SlidingLog {
			in = u.at > t-tm.W
		} else {
			in = u.at/tm.w >= t/tm.w-tm.N
		}
		if in {
			s += u.n
			keep = append(keep, u)
		}
	}
	m.units = keep
	return s
}

// keyFate says what the engine must hold for a key at t: kept (its limit
// override with it), reclaimed (by the sweep that ran at t), or either
// (the model does not know, so the test leaves the key alone).
type keyFate int

const (
	fateKept keyFate = iota
	fateReclaimed
	fateEither
)

// held reports whether the engine surely holds m's key at t: it admitted
// or set a limit recently enough that no sweep can have taken it.
func (tm tableModel) held(m *keyModel, t int64) bool {
	if m.lastSure == 0 {
		return false
	}
	if tm.alg == engine.SlidingLog {
		return t-m.lastSure <= tm.W
	}
	return t/tm.w-m.lastSure/tm.w <= tm.N+1
}

// fate classifies m at t; swept says a full Sweep ran at t before the
// round. Only a key with an override can tell kept from reclaimed: every
// other key's counts have left its window long before a sweep may take
// it, so for it both are the same.
func (tm tableModel) fate(m *keyModel, t int64, swept bool) keyFate {
	if m.lastMaybe == 0 {
		return fateKept
	}
	var kept, gone bool
	if tm.alg == engine.SlidingLog {
		kept = t-m.lastSure <= tm.W
		gone = t-m.lastMaybe > tm.W
	} else {
		kept = t/tm.w-m.lastSure/tm.w <= tm.N+1
		gone = t/tm.w-m.lastMaybe/tm.w >= tm.N+2
	}
	switch {
	case kept && m.lastSure != 0:
		return fateKept
	case gone && swept:
		return fateReclaimed
	case !m.override:
		return fateKept // indistinguishable from reclaimed
	}
	return fateEither
}

// decide makes one random request of m's key at t and checks it.
func (tm tableModel) decide(e *engine.Engine, rng *rand.Rand, key string, m *keyModel, t int64) error {
	now := time.Unix(0, t)
	switch op := rng.IntN(20); {
	case op < 2: // a limit change: raised (a log grows) or lowered
		l := 1 + rng.Int64N(3*m.base)
		err := e.SetLimitAt(key, l, now)
		if tm.capped && errors.Is(err, shard.ErrFull) && !tm.held(m, t) {
			return nil // a new key at MaxKeys: SetLimitAt stores nothing
		}
		if err != nil {
			return fmt.Errorf("key %q: SetLimitAt(%d): %v", key, l, err)
		}
		m.limit, m.override = l, true
		m.lastSure, m.lastMaybe = t, t
		return nil
	case op < 5: // reserve and take back
		n := 1 + rng.Int64N(max(1, m.limit/4))
		r := e.ReserveAt(key, n, now)
		if err := tm.check(key, m, t, n, r.Decision()); err != nil {
			return fmt.Errorf("ReserveAt: %w", err)
		}
		if r.Decision().Allowed {
			if !r.Cancel() {
				return fmt.Errorf("key %q: Cancel of an admission at the key's present returned false", key)
			}
			m.units = m.units[:len(m.units)-1]
		}
		return nil
	case op < 7:
		return tm.check(key, m, t, 0, e.AllowAt(key, 0, now))
	case op < 8:
		return tm.check(key, m, t, m.limit+1, e.AllowAt(key, m.limit+1, now))
	default:
		n := 1 + rng.Int64N(max(1, m.limit/4))
		return tm.check(key, m, t, n, e.AllowAt(key, n, now))
	}
}

// check compares d, the engine's answer to n units of key at t, with the
// model, and records an admission in it.
func (tm tableModel) check(key string, m *keyModel, t, n int64, d engine.Decision) error {
	if tm.capped && d.Reason() == engine.ReasonKeysFull && !tm.held(m, t) {
		if n <= m.limit && (d.Limit != m.base || d.Remaining != m.base || d.RetryAfter <= 0) {
			return fmt.Errorf("key %q at MaxKeys: %d units gave %+v, want refused with its own full limit %d", trimKey(key), n, d, m.base)
		}
		return nil // nothing stored; the model's counts have left its window
	}
	m.lastMaybe = t
	s := tm.sum(m, t)
	want := engine.Decision{Limit: m.limit}
	switch {
	case n > m.limit:
		want.RetryAfter = engine.Never
		want.Remaining = d.Remaining // not specified
	case n == 0:
		want.Allowed, want.Remaining = true, max(0, m.limit-s)
	case s+n <= m.limit:
		want.Allowed, want.Remaining = true, m.limit-s-n
	default:
		want.Remaining = max(0, m.limit-s)
		want.RetryAfter = d.RetryAfter
		if d.RetryAfter <= 0 || d.RetryAfter == engine.Never {
			want.RetryAfter = -1 // must be a finite wait
		}
	}
	if d != want {
		return fmt.Errorf("key %q (%d bytes, base limit %d, override %v) at %v: %d units gave %+v, want %+v (%d units in its window)",
			trimKey(key), len(key), m.base, m.override, time.Unix(0, t).Sub(t0), n, d, want, s)
	}
	if d.Allowed && n > 0 {
		m.units = append(m.units, modelUnit{at: t, n: n})
		m.lastSure = t
	}
	return nil
}

func trimKey(k string) string {
	if len(k) > 20 {
		return k[:8] + "…" + k[len(k)-8:]
	}
	return k
}

// churnTable runs rounds of decisions on keys in one shard: each round sets
// the clock to its time, sometimes runs a full Sweep first, then four owners
// decide on their own keys while another goroutine sweeps and visits every
// key (UpdateLimits keeping each limit) without pause. Rounds alternate
// between most keys active, with short steps (the hints grow), and a few
// keys active, with steps long enough that the rest go idle and are swept
// (the hints shrink), so keys keep leaving and coming back.
func churnTable(t *testing.T, alg engine.Algorithm, keys []string, rounds int, maxKeys int64) {
	const (
		W      = time.Second
		N      = 10
		w      = W / N
		owners = 4
	)
	limits := make(map[string]int64, len(keys))
	models := make([]keyModel, len(keys))
	for i, k := range keys {
		limits[k] = int64(10 + i)
		models[i] = keyModel{base: int64(10 + i), limit: int64(10 + i)}
	}
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{
		Limit: 1, Window: W, SubWindows: N, Algorithm: alg, Clock: clk, Shards: 1,
		SweepInterval: time.Hour, MaxKeys: maxKeys,
		LookupCache: true, // the cache in front of the map is what churn attacks
		KeyLimit:    func(k string) int64 { return limits[k] },
	})
	tm := tableModel{alg: alg, W: int64(W), w: int64(w), N: N, capped: maxKeys > 0}
	rng := rand.New(rand.NewPCG(1, uint64(alg)))
	now := t0.UnixNano()
	reclaimed, revived := 0, 0
	for r := range rounds {
		steps := []int64{1, 1, 1, 3, 12, 25}
		now += steps[rng.IntN(len(steps))] * int64(w)
		clk.Set(time.Unix(0, now))
		swept := r%2 == 0
		if swept {
			reclaimed += e.Sweep()
		}
		active := 0.9
		if r%10 >= 5 {
			active = 0.1
		}
		errs := make(chan error, owners)
		stop := make(chan struct{})
		var churn sync.WaitGroup
		churn.Add(1)
		go func() {
			defer churn.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				e.Sweep()
				if n := e.Len(); maxKeys > 0 && n > maxKeys {
					errs <- fmt.Errorf("round %d: Len %d above MaxKeys %d", r, n, maxKeys)
					return
				}
				if err := e.UpdateLimits(func(string, int64) int64 { return 0 }); err != nil {
					errs <- err
					return
				}
			}
		}()
		var wg sync.WaitGroup
		counts := make([]int, owners)
		for o := range owners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), uint64(o)))
				for i := o; i < len(keys); i += owners {
					m := &models[i]
					if rng.Float64() >= active {
						continue
					}
					switch tm.fate(m, now, swept) {
					case fateEither:
						continue
					case fateReclaimed:
						if m.override {
							counts[o]++
						}
						m.limit, m.override, m.units = m.base, false, m.units[:0]
					}
					for range 1 + rng.IntN(3) {
						if err := tm.decide(e, rng, keys[i], m, now); err != nil {
							errs <- fmt.Errorf("round %d: %w", r, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		churn.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, c := range counts {
			revived += c
		}
	}
	t.Logf("%d keys, %d rounds: %d reclaimed by the rounds' sweeps, %d overrides seen gone; %d keys held at the end, %d refused by MaxKeys",
		len(keys), rounds, reclaimed, revived, e.Len(), e.Stats().Refused)
	if maxKeys > 0 && e.Stats().Refused == 0 {
		t.Fatalf("no key was refused at MaxKeys %d: the test did not reach the cap", maxKeys)
	}
	if reclaimed == 0 || revived == 0 {
		t.Fatalf("the rounds reclaimed %d keys and saw %d overrides go: the test did not churn", reclaimed, revived)
	}
}

// TestReclaimedKeysComeBackEmptyUnderChurn: thousands of keys in one shard
// go idle, are swept, and come back, while their owners decide and other
// goroutines sweep; every decision matches its own key's exact history
// (SlidingWindowStrict counts the N+1 sub-windows the window overlaps), a
// reclaimed key comes back with its own KeyLimit and no counts, and a kept
// one keeps its counts and its SetLimit override.
func TestReclaimedKeysComeBackEmptyUnderChurn(t *testing.T) {
	rounds := 200
	if raceOn || testing.Short() {
		rounds = 60
	}
	churnTable(t, engine.SlidingWindowStrict, tableKeys(1500), rounds, 0)
}

// TestReclaimedLogKeysComeBackEmptyUnderChurn is the same churn for
// SlidingLog keys, whose SetLimit above the log's capacity moves the log
// into a larger ring (Grow) while other keys of the shard are decided.
func TestReclaimedLogKeysComeBackEmptyUnderChurn(t *testing.T) {
	rounds := 200
	if raceOn || testing.Short() {
		rounds = 60
	}
	churnTable(t, engine.SlidingLog, tableKeys(0), rounds, 0)
}

// TestKeysAtMaxKeysUnderChurn is the churn with MaxKeys far below the keys
// in use: a key the engine may not hold can be refused (ReasonKeysFull,
// with its own full limit), one it surely holds never is, Len never passes
// the cap, and every other decision matches the key's exact model.
func TestKeysAtMaxKeysUnderChurn(t *testing.T) {
	rounds := 200
	if raceOn || testing.Short() {
		rounds = 60
	}
	churnTable(t, engine.SlidingWindowStrict, tableKeys(1500), rounds, 600)
}

// With the lookup cache on, an engine decides exactly as with it off: two
// engines, one of each, given the same script over thousands of keys of
// one shard (enough for the cache to start), with sweeps that reclaim and
// keys that come back, return the same Decision every time.
func TestLookupCacheChangesNoDecision(t *testing.T) {
	clk := engine.NewManualClock(t0)
	cfg := engine.Config{Limit: 7, Window: time.Second, Shards: 1, Clock: clk, SweepInterval: time.Hour}
	off := newEngine(t, cfg)
	cfg.LookupCache = true
	on := newEngine(t, cfg)
	if !on.Config().LookupCache || off.Config().LookupCache {
		t.Fatalf("Config() does not report LookupCache: on %v, off %v", on.Config().LookupCache, off.Config().LookupCache)
	}
	keys := tableKeys(3000)
	rng := rand.New(rand.NewPCG(7, 11))
	now := t0
	for step := range 60_000 {
		if step%5_000 == 4_999 { // an idle stretch: most keys are reclaimed
			now = now.Add(3 * time.Second)
			clk.Set(now)
			if a, b := on.Sweep(), off.Sweep(); a != b {
				t.Fatalf("step %d: Sweep reclaimed %d keys with the cache, %d without", step, a, b)
			}
		}
		now = now.Add(time.Duration(rng.IntN(int(time.Millisecond))))
		clk.Set(now)
		k := keys[rng.IntN(len(keys))]
		n := int64(rng.IntN(3))
		if a, b := on.AllowAt(k, n, now), off.AllowAt(k, n, now); a != b {
			t.Fatalf("step %d: AllowAt(%q, %d) = %+v with the cache, %+v without", step, k, n, a, b)
		}
	}
	if on.Len() != off.Len() {
		t.Fatalf("Len %d with the cache, %d without", on.Len(), off.Len())
	}
}
