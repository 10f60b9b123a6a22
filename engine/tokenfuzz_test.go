package engine_test

import (
	"testing"
	"time"
)

// FuzzTokenBucketOperations decodes bytes into a bucket shape and a script
// of AllowAt, ReserveAt, Cancel and ChargeAt at moving, sometimes older
// times, and checks every outcome against the exact GCRA model.
func FuzzTokenBucketOperations(f *testing.F) {
	f.Add(uint8(0), []byte{1, 0, 5, 1, 2, 200, 3, 9, 130, 8, 7, 66, 9, 1, 1})
	f.Add(uint8(1), []byte{6, 10, 0, 6, 3, 0, 7, 200, 250, 8, 1, 1, 0, 0, 0})
	f.Add(uint8(2), []byte{255, 255, 255, 0, 0, 0, 9, 9, 9, 128, 128, 128})
	f.Add(uint8(7), []byte{0, 100, 1, 0, 100, 1, 0, 100, 1, 7, 255, 3, 8, 0, 0})
	f.Add(uint8(4), []byte{9, 2, 2, 9, 2, 2, 0, 3, 250, 0, 3, 1})
	f.Fuzz(func(t *testing.T, shape uint8, data []byte) {
		c := tbConfigs[int(shape)%len(tbConfigs)]
		burst := c.burst
		tick := max(int64(c.window)/c.limit, 1)
		var ops []tbOp
		for i := 0; i+2 < len(data) && len(ops) < 300; i += 3 {
			a, b, k := data[i], data[i+1], data[i+2]
			o := tbOp{kind: int(a % 10), key: int(k % 3), pick: int(k)}
			o.n = int64(a/10)%(burst+2) + 1 // 1 … burst+2: some above Burst
			switch {
			case b < 160:
				o.dt = tick * int64(b) / 32
			case b < 224:
				o.dt = int64(c.window) * int64(b-160) / 8
			default:
				o.back = tick * int64(b-224)
			}
			ops = append(ops, o)
		}
		runTokenScript(t, c.limit, time.Duration(c.window), c.burst, ops)
	})
}
