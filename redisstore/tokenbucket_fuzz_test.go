package redisstore

import (
	"fmt"
	"math"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// newTBRate accepts exactly the configurations whose every script value is
// exact, and its p/q and depth are the configuration's: checked in
// math/big for any limit, burst and window in the engine's ranges.
func FuzzTokenBucketRate(f *testing.F) {
	for _, s := range [][3]int64{
		{7, 1, int64(time.Millisecond)},
		{1<<40 - 1, 96_880_167, int64(time.Second + 1)},
		{1<<40 - 1, 96_880_168, int64(time.Second + 1)},
		{1, 312_749, int64(time.Hour)},
		{1, 312_750, int64(time.Hour)},
		{1, 1, 1<<52 - 1003},
		{1, 1, 1<<52 + 1},
		{1<<40 - 1, 1<<40 - 1, int64(engine.MaxWindow)},
	} {
		f.Add(s[0], s[1], s[2])
	}
	two53 := new(big.Int).Lsh(big.NewInt(1), 53)
	two50 := new(big.Int).Lsh(big.NewInt(1), 50)
	f.Fuzz(func(t *testing.T, limit, burst, window int64) {
		limit = 1 + abs(limit)%engine.MaxLimit
		burst = 1 + abs(burst)%engine.MaxLimit
		window = 1 + abs(window)%int64(engine.MaxWindow)
		T := big.NewRat(window, 1000*limit) // µs, in lowest terms
		p, q := T.Num(), T.Denom()
		depth := new(big.Int).Mul(big.NewInt(burst), p)
		sum := new(big.Int).Add(depth, p)
		sum.Add(sum, new(big.Int).Lsh(q, 1))
		fill := new(big.Int).Quo(depth, q) // ⌊depth/q⌋ < 2^50 ⟺ depth/q < 2^50
		exact := sum.Cmp(two53) <= 0 && fill.Cmp(two50) < 0
		r, err := newTBRate(limit, burst, time.Duration(window))
		if exact != (err == nil) {
			t.Fatalf("limit %d burst %d window %d: exact %v, newTBRate %+v %v", limit, burst, window, exact, r, err)
		}
		if err == nil && (r.p != p.Int64() || r.q != q.Int64() || r.depth != depth.Int64()) {
			t.Fatalf("limit %d burst %d window %d: %+v, want p/q %s, depth %s", limit, burst, window, r, T.RatString(), depth)
		}
	})
}

// waitNs is ⌈(us + ticks/q) µs in ns⌉ over the whole range the script can
// return: us < 2^53, |ticks| < 2^53, 1 ≤ q < 2^50.
func FuzzTokenBucketWait(f *testing.F) {
	f.Add(int64(0), int64(2), int64(7))
	f.Add(int64(0), int64(-5), int64(7))
	f.Add(int64(1), int64(-7), int64(7))
	f.Add(int64(1<<53-1), int64(1<<53-1), int64(1))
	f.Add(int64(3), int64(-(1 << 52)), int64(1<<50-1))
	f.Fuzz(func(t *testing.T, us, ticks, q int64) {
		us = abs(us) % (1 << 53)
		ticks %= 1 << 53
		q = 1 + abs(q)%(1<<50-1)
		x := new(big.Rat).Add(big.NewRat(us, 1), big.NewRat(ticks, q))
		if x.Sign() <= 0 {
			return // a denial's wait is positive
		}
		ns := new(big.Rat).Mul(x, big.NewRat(1000, 1))
		want := new(big.Int).Quo(ns.Num(), ns.Denom())
		if !ns.IsInt() {
			want.Add(want, big.NewInt(1))
		}
		got := waitNs(us, ticks, q)
		if !want.IsInt64() || want.Int64() >= int64(engine.Never) {
			if got != engine.Never-1 {
				t.Fatalf("waitNs(%d, %d, %d) = %d, want the saturated %d", us, ticks, q, got, engine.Never-1)
			}
			return
		}
		if int64(got) != want.Int64() {
			t.Fatalf("waitNs(%d, %d, %d) = %d, want %s", us, ticks, q, got, want)
		}
	})
}

func abs(x int64) int64 {
	if x < 0 {
		if x == math.MinInt64 {
			return math.MaxInt64
		}
		return -x
	}
	return x
}

// Operation sequences on the script, against the exact model: each input
// picks one of tbConfigs and a run of operations, 3 bytes each (a time
// step's kind and size, and n), on a fresh key, at fixed instants.
func FuzzTokenBucketOperations(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 1, 0, 1, 2, 5, 1, 3, 9, 1})
	f.Add([]byte{1, 9, 200, 20, 3, 1, 1, 4, 7, 2, 0, 0, 20})
	f.Add([]byte{6, 1, 255, 255, 2, 7, 1, 0, 0, 0, 5, 3, 255})
	f.Add([]byte{7, 0, 0, 1, 3, 200, 1, 4, 0, 1})
	s := redistest.Start(f)
	c := client(f, s)
	var keys atomic.Int64
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 4 || len(in) > 3*200+1 {
			return
		}
		cf := tbConfigs[int(in[0])%len(tbConfigs)]
		h := newTBAt(t, c, cf.limit, cf.burst, cf.window, fmt.Sprintf("fuzz%d", keys.Add(1)))
		burst := h.b.capacity(cf.limit)
		m := newGCRAModel(cf.limit, burst, cf.window)
		tUs := new(big.Rat).Quo(big.NewRat(int64(cf.window), 1), big.NewRat(1000*cf.limit, 1))
		now := t0
		for op := 1; op+2 < len(in); op += 3 {
			size := int64(in[op+1])
			switch in[op] % 5 {
			case 0: // size µs forward
				now += size
			case 1: // size/16 of T forward
				x := new(big.Rat).Mul(tUs, big.NewRat(size, 16))
				now += min(1<<45, new(big.Int).Quo(x.Num(), x.Denom()).Int64())
			case 2: // size µs back
				now -= size
			case 3: // size T forward
				x := new(big.Rat).Mul(tUs, big.NewRat(size, 1))
				now += min(1<<45, new(big.Int).Quo(x.Num(), x.Denom()).Int64())
			}
			n := int64(in[op+2])
			if n == 255 {
				n = burst
			} else {
				n = min(n, burst)
			}
			wa, wr, wra := m.decide(now, n)
			ga, gr, gra := h.at(now, n, cf.limit)
			if ga != wa || gr != wr || gra != wra {
				t.Fatalf("op %d: %d units at t0+%dµs: script %v, %d, %v; model %v, %d, %v (model TAT %s)",
					op/3, n, now-t0, ga, gr, gra, wa, wr, wra, m.tatString())
			}
		}
	})
}
