package ringslot

import (
	"math"
	"testing"
)

// BucketUnits reduces Limit and Window by their gcd, so that T = W' units
// exactly, and refuses a span B·W' above 2^60, also where the product
// passes 64 bits.
func TestBucketUnits(t *testing.T) {
	for _, c := range []struct {
		limit, window, burst int64
		rate, step, tau      int64
		ok                   bool
	}{
		{100, 1e9, 100, 1, 1e7, 1e9, true},
		{7, 1e6, 7, 7, 1e6, 7e6, true},
		{1<<40 - 1, 1e9, 1000, (1<<40 - 1) / 25, 4e7, 4e10, true},
		{999_999, 86_400e9, 999_999, 37_037, 3_200_000_000_000, 0, false},
		{1, 1 << 60, 1, 1, 1 << 60, 1 << 60, true}, // exactly 2^60
		{1, 1 << 60, 2, 1, 1 << 60, 0, false},
		{1, math.MaxInt64, 1<<40 - 1, 1, math.MaxInt64, 0, false}, // the product passes 64 bits
	} {
		rate, step, tau, ok := BucketUnits(c.limit, c.window, c.burst)
		if rate != c.rate || step != c.step || ok != c.ok || (ok && tau != c.tau) {
			t.Errorf("BucketUnits(%d, %d, %d) = %d, %d, %d, %v; want %d, %d, %d, %v", c.limit, c.window, c.burst, rate, step, tau, ok, c.rate, c.step, c.tau, c.ok)
		}
	}
}

// A bucket's state is two words and the key: one 64-byte line for keys of
// up to 47 bytes, two from 48.
func TestBucketStateSize(t *testing.T) {
	g := NewBucket(10, 1e9, 5)
	for _, c := range []struct{ key, bytes int }{{0, 64}, {8, 64}, {47, 64}, {48, 128}, {111, 128}, {112, 192}} {
		if got := g.Bytes(c.key); got != c.bytes {
			t.Errorf("Bytes(%d) = %d, want %d", c.key, got, c.bytes)
		}
	}
}

// Carry keeps the TAT exact: the new ring's base and u name the same
// instant, in the same units, and a full bucket starts with u = 0.
func TestCarryKeepsTheInstant(t *testing.T) {
	g := NewBucket(1<<40-1, 1<<59, 2) // L' = 2^40 − 1: span ≈ 2 ms
	b := &g.bk
	for _, c := range []struct{ base, u, t int64 }{
		{1e18, 5 * b.rate, 1e18 + b.span + 1},            // TAT in the past: full
		{1e18, b.span*b.rate + 12345, 1e18 + b.span + 1}, // TAT ahead of the mover
		{1e18, b.span*b.rate + 1<<60, 1e18},              // an older writer: base + span
		{1e18, 3*b.rate + 7, 1e18},                       // TAT barely past base: ⌊TAT⌋
	} {
		old := newBucket(c.base, c.u, "key")
		old.word(bucketTAT).Store(c.u | math.MinInt64)
		nr := g.Carry(old, c.t)
		nb, nu := nr.word(bucketBase).Load(), nr.word(bucketTAT).Load()
		if g.Key(nr) != "key" || nb < c.base || nu < 0 || nu > c.u {
			t.Fatalf("%+v: base %d, u %d, key %q", c, nb, nu, g.Key(nr))
		}
		// TAT in units since c.base: old u against (nb − base)·L' + nu,
		// or a full bucket at nb when TAT ≤ nb.
		shift := (nb - c.base) * b.rate
		if nu > 0 && shift+nu != c.u {
			t.Errorf("%+v: the TAT moved: %d + %d ≠ %d", c, shift, nu, c.u)
		}
		if nu == 0 && shift < c.u {
			t.Errorf("%+v: full at %d, but the TAT is %d units later", c, nb, c.u-shift)
		}
	}
}
