package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Keys whose home-slab candidate slots are forced to coincide
// (shard.Table.ForceHashMask keeps some bits of the hash: with only the
// low 32 bits every key's second candidate is slot 0, with only the high
// ones every first candidate is; a few bits of each make full-hash
// collisions too) must decide exactly as the same keys in an engine with
// its own random hash, step by step: the same Allowed, Limit, Remaining
// and RetryAfter, the same Reset, Cancel and Sweep answers, the same Len.
// The keys take every length the slab's head and tail compare cover (0,
// 1, 7, 8, 9, 15, 16, …, up to MaxKeyBytes), including keys that differ
// only in their last byte or in a trailing NUL. The timeline jumps past
// idleness (every key reclaimed and recreated), 2^21 sub-windows and
// more ahead (a writer retires and replaces the ring), and backwards.
func TestSharedSlotsDecideAsPrivateHashes(t *testing.T) {
	masks := []uint64{0, 0xFFFF_FFFF, 0xFFFF_FFFF_0000_0000, 0x3F | 0x3F<<32}
	type variant struct {
		name string
		cfg  Config
	}
	var variants []variant
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog, TokenBucket} {
		variants = append(variants, variant{alg.String(), Config{Algorithm: alg}})
		if alg != TokenBucket {
			variants = append(variants, variant{alg.String() + "/keylimit", Config{Algorithm: alg,
				KeyLimit: func(k string) int64 { return 2 + int64(len(k)%5) }}})
		}
	}
	variants = append(variants,
		variant{"n1", Config{SubWindows: 1}},
		variant{"n3/maxkeys", Config{SubWindows: 3, MaxKeys: 40}},
		variant{"strict-n7", Config{Algorithm: SlidingWindowStrict, SubWindows: 7}},
		variant{"n40", Config{SubWindows: 40}},
		variant{"n50-perkey", Config{SubWindows: 50, PerKeyLimits: true}},
	)
	keys := slotEdgeKeys()
	for _, v := range variants {
		for _, m := range masks {
			t.Run(fmt.Sprintf("%s/mask=%#x", v.name, m), func(t *testing.T) {
				sharedSlotsDifferential(t, v.cfg, m, keys)
			})
		}
	}
}

// slotEdgeKeys returns keys of the lengths around the slab's head (the
// length byte and 7 bytes) and its slot sizes, with near twins.
func slotEdgeKeys() []string {
	var keys []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	add("")
	add("\x00")
	add("\x00\x00\x00\x00\x00\x00\x00")
	add("\x00\x00\x00\x00\x00\x00\x00\x00")
	add("\xff\xff\xff\xff\xff\xff\xff\xff")
	add("a")
	add("a\x00")
	for _, n := range []int{1, 6, 7, 8, 9, 14, 15, 16, 17, 22, 23, 24, 31, 55, 56, 63, 64, 70, 71, 72, 79, 80, 127, 128, 129, 300, DefaultMaxKeyBytes} {
		base := strings.Repeat("k", n)
		add(base)
		b := []byte(base)
		b[n-1] = 'x' // differs in the last byte only
		add(string(b))
		b[0] = 'x' // and in the first
		add(string(b))
		if n > 8 {
			c := []byte(base)
			c[7] = 'y' // the first byte after the head
			add(string(c))
		}
		for i := range 3 {
			add(fmt.Sprintf("%0*d", n, i))
		}
	}
	return keys
}

func sharedSlotsDifferential(t *testing.T, base Config, mask uint64, keys []string) {
	const window = 210 * time.Millisecond
	t0 := time.Unix(1_700_000_000, 0)
	mk := func(force bool) (*Engine, *ManualClock) {
		cfg := base
		cfg.Limit, cfg.Window = 4, window
		clk := NewManualClock(t0)
		cfg.Clock, cfg.Shards = clk, 1
		cfg.SweepInterval = time.Hour // sweeps are the test's own
		e, err := New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { e.Close() })
		if force {
			e.tab.ForceHashMask(mask)
		}
		return e, clk
	}
	a, ca := mk(true)
	b, cb := mk(false)
	perKey := a.cfg.PerKeyLimits || base.KeyLimit != nil
	rng := rand.New(rand.NewPCG(uint64(mask), 7))
	now := t0
	type pair struct{ ra, rb Reservation }
	var held []pair
	w := window / 10
	for step := range 600 {
		switch r := rng.IntN(1000); {
		case r < 5: // 2^21 and more sub-windows ahead: a writer retires the key's ring itself
			now = now.Add(time.Duration(1<<21+rng.IntN(1<<20)) * w)
		case r < 15: // idle past every key's reclamation: all are swept and recreated
			now = now.Add(4*window + time.Duration(rng.IntN(int(w))))
		case r < 40:
			now = now.Add(-time.Duration(rng.IntN(int(2 * w)))) // backwards
		case r < 300:
			now = now.Add(time.Duration(rng.IntN(int(w / 2))))
		}
		ca.Set(now)
		cb.Set(now)
		k := keys[rng.IntN(len(keys))]
		where := fmt.Sprintf("step %d key len %d %q at +%v", step, len(k), trunc(k), now.Sub(t0))
		switch r := rng.IntN(100); {
		case r < 4:
			require.Equal(t, b.Sweep(), a.Sweep(), "Sweep: %s", where)
		case r < 10:
			require.Equal(t, b.Reset(k), a.Reset(k), "Reset: %s", where)
		case r < 14 && perKey:
			l := 1 + rng.Int64N(6)
			require.Equal(t, b.SetLimitAt(k, l, now) == nil, a.SetLimitAt(k, l, now) == nil, "SetLimitAt: %s", where)
		case r < 22:
			n := rng.Int64N(3)
			p := pair{a.ReserveAt(k, n, now), b.ReserveAt(k, n, now)}
			require.Equal(t, p.rb.Decision(), p.ra.Decision(), "ReserveAt: %s", where)
			held = append(held, p)
		case r < 28 && len(held) > 0:
			i := rng.IntN(len(held))
			p := held[i]
			held = append(held[:i], held[i+1:]...)
			require.Equal(t, p.rb.Cancel(), p.ra.Cancel(), "Cancel of %q: %s", trunc(p.ra.Key()), where)
		default:
			n := rng.Int64N(4)
			require.Equal(t, b.AllowAt(k, n, now), a.AllowAt(k, n, now), "AllowAt n=%d: %s", n, where)
		}
		require.Equal(t, b.Len(), a.Len(), "Len: %s", where)
	}
	// Every key's state, read without recording.
	for _, k := range keys {
		require.Equal(t, b.AllowAt(k, 0, now), a.AllowAt(k, 0, now), "final %q", trunc(k))
	}
}

func trunc(k string) string {
	if len(k) > 24 {
		return fmt.Sprintf("%s…(%d)", k[:24], len(k))
	}
	return k
}
