package ringslot

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Every state starts on a cache line and fills whole lines, for every
// geometry and key length: the allocator puts sizes that are multiples of
// 64 in classes whose objects sit at multiples of their size.
func TestStatesAreLineAligned(t *testing.T) {
	geos := []*Geometry{
		NewGeometry(sec/10, 10, true, false), NewGeometry(sec/10, 10, true, true),
		NewGeometry(sec/10, 10, false, false), NewGeometry(sec, 0, false, false),
		NewGeometry(sec/100, 100, true, false), NewLog(sec), NewBucket(10, sec, 5),
	}
	var keep []Ring
	for _, g := range geos {
		for n := 0; n <= 700; n += 7 {
			key := strings.Repeat("k", n)
			for range 3 {
				r := g.New(t0, 10, key)
				keep = append(keep, r)
				require.Zero(t, uintptr(unsafe.Pointer(r.p))%CacheLine, "geometry %+v, key of %d bytes", g.words, n)
				require.Zero(t, g.Bytes(n)%CacheLine)
			}
		}
	}
	require.NotEmpty(t, keep)
}

// Key returns exactly the key; HasKey (and MatchKey where it knows) tell it
// from every key that differs in its length or in any one byte, for
// lengths across the one-byte and two-byte length forms and the inline
// 8–16 byte compare.
func TestKeyRoundTripAndMatch(t *testing.T) {
	for _, g := range []*Geometry{NewGeometry(sec/10, 10, true, false), NewGeometry(sec, 0, false, true), NewLog(sec)} {
		for n := 0; n <= 300; n++ {
			if n > 40 && n%13 != 0 && n != 127 && n != 128 {
				continue
			}
			b := make([]byte, n)
			for i := range b {
				b[i] = byte('a' + i%26)
			}
			key := string(b)
			r := g.New(t0, 5, key)
			require.Equal(t, key, g.Key(r))
			require.True(t, g.HasKey(r, key))
			if m, known := g.MatchKey(r, key); known {
				require.True(t, m, "MatchKey, %d bytes", n)
			}
			check := func(other string, what string) {
				require.False(t, g.HasKey(r, other), "%d bytes: %s", n, what)
				if m, known := g.MatchKey(r, other); known {
					require.False(t, m, "MatchKey, %d bytes: %s", n, what)
				}
			}
			check(key+"x", "one byte longer")
			if n > 0 {
				check(key[:n-1], "one byte shorter")
			}
			for i := range n {
				c := []byte(key)
				c[i] ^= 0x20
				check(string(c), "byte "+string(rune('0'+i%10))+" differs")
			}
		}
	}
}
