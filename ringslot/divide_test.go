package ringslot

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDividerIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ds := []int64{1, 2, 3, 4, 7, 10, 11, 1001, 1 << 20, 1e8, 1e9, 1 << 62, 1<<62 + 1, math.MaxInt64}
	for i := 0; i < 200; i++ {
		ds = append(ds, 1+rng.Int64N(1<<rng.IntN(63)))
	}
	ns := []int64{0, 1, math.MaxInt64, math.MaxInt64 - 1}
	for i := 0; i < 2000; i++ {
		ns = append(ns, rng.Int64()>>rng.IntN(63))
	}
	for _, d := range ds {
		v := newDivider(d)
		for _, n := range ns {
			for _, x := range []int64{n, n / d * d, n/d*d - 1, n/d*d + d - 1} {
				if x < 0 {
					continue
				}
				q, r := v.divmod(x)
				if q != x/d || r != x%d {
					t.Fatalf("divmod(%d, %d) = %d, %d; want %d, %d", x, d, q, r, x/d, x%d)
				}
			}
		}
	}
}
