package redisstore

import (
	"encoding/binary"
	"math"
	"math/big"
	"testing"
	"time"
)

// gcraModel is the token bucket's reference: GCRA in exact rational
// arithmetic (math/big), written from the definition, with none of the
// script's units, reductions or bounds. Time is in µs, as Redis TIME is.
// A key's bucket holds burst units and refills one unit per T =
// window/limit; its state is the theoretical arrival time tat (nil: a
// fresh key, a full bucket). n units fit at now iff
//
//	max(tat, now) + n·T − now ≤ burst·T,
//
// and then tat becomes max(tat, now) + n·T.
type gcraModel struct {
	t     *big.Rat // T, µs
	burst int64
	tat   *big.Rat // µs; nil: fresh
}

func newGCRAModel(limit, burst int64, window time.Duration) *gcraModel {
	return &gcraModel{t: big.NewRat(int64(window), 1000*limit), burst: burst}
}

// setRate changes T (a key's new limit), keeping tat.
func (m *gcraModel) setRate(limit int64, window time.Duration) {
	m.t = big.NewRat(int64(window), 1000*limit)
}

// decide is one decision at now (µs) for n units, 0 ≤ n ≤ burst: whether
// it is admitted, the whole units left (after it, if admitted), and a
// denial's least wait, in ns rounded up.
func (m *gcraModel) decide(now, n int64) (allowed bool, remaining int64, retry time.Duration) {
	t := big.NewRat(now, 1)
	tat := t
	if m.tat != nil && m.tat.Cmp(t) > 0 {
		tat = m.tat
	}
	bt := new(big.Rat).Mul(big.NewRat(m.burst, 1), m.t)                    // burst·T
	next := new(big.Rat).Add(tat, new(big.Rat).Mul(big.NewRat(n, 1), m.t)) // tat + n·T
	over := new(big.Rat).Sub(new(big.Rat).Sub(next, t), bt)                // tat + n·T − now − burst·T
	left := func(tat *big.Rat) int64 {                                     // ⌊(now + burst·T − tat)/T⌋, at least 0
		room := new(big.Rat).Sub(new(big.Rat).Add(t, bt), tat)
		if room.Sign() < 0 {
			return 0
		}
		q := new(big.Rat).Quo(room, m.t)
		return new(big.Int).Quo(q.Num(), q.Denom()).Int64()
	}
	if n == 0 { // a read: admitted, nothing written
		return true, left(tat), 0
	}
	if over.Sign() <= 0 {
		m.tat = next
		return true, left(next), 0
	}
	ns := new(big.Rat).Mul(over, big.NewRat(1000, 1))
	c := new(big.Int).Quo(ns.Num(), ns.Denom()) // over > 0: truncation is the floor
	if !ns.IsInt() {
		c.Add(c, big.NewInt(1))
	}
	return false, left(tat), time.Duration(c.Int64())
}

// tatString is the model's tat as a fraction of µs, for messages.
func (m *gcraModel) tatString() string {
	if m.tat == nil {
		return "fresh"
	}
	return m.tat.RatString()
}

// decodeTBState reads a token bucket's state (see tbSource): TAT = a + b/q
// µs, checking the tag, that every field is an exact integer below 2^53,
// and that 0 ≤ b < q.
func decodeTBState(tb testing.TB, raw string) (a, b, q int64) {
	tb.Helper()
	if len(raw) != 25 || raw[0] != 'g' {
		tb.Fatalf("token bucket state %q: want 'g' and 24 bytes", raw)
	}
	var v [3]int64
	for i := range v {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[1+8*i : 9+8*i])))
		if f != math.Trunc(f) || f < 0 || f >= 1<<53 {
			tb.Fatalf("token bucket state value %v is not an exact non-negative integer", f)
		}
		v[i] = int64(f)
	}
	if v[2] < 1 || v[1] >= v[2] {
		tb.Fatalf("token bucket state: b = %d, q = %d, want 0 ≤ b < q", v[1], v[2])
	}
	return v[0], v[1], v[2]
}
