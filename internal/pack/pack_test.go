package pack

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWordRoundTripAtEdges(t *testing.T) {
	tags := []Tag{0, 1, tagMask - 1, tagMask}
	counts := []int64{0, 1, MaxCount - 1, MaxCount}
	for _, tg := range tags {
		for _, c := range counts {
			w := Word(tg, c)
			require.Equal(t, tg, TagOfWord(w), "tag of Word(%d,%d)", tg, c)
			require.Equal(t, c, CountOfWord(w), "count of Word(%d,%d)", tg, c)
		}
	}
}

func TestLargestCountDoesNotCarryIntoTag(t *testing.T) {
	w := Word(5, MaxCount)
	require.Equal(t, Tag(5), TagOfWord(w))
	// One more unit would carry: that is why writers cap counts at MaxCount.
	require.Equal(t, Tag(6), TagOfWord(w+1))
}

func TestTagOfWrapsAndHandlesNegativeEpochs(t *testing.T) {
	require.Equal(t, Tag(0), TagOf(1<<TagBits))
	require.Equal(t, Tag(1), TagOf(1<<TagBits+1))
	require.Equal(t, Tag(tagMask), TagOf(-1))
	require.Equal(t, Tag(0), TagOf(math.MinInt64))
	require.Equal(t, TagOf(math.MaxInt64), Tag(tagMask))
}

func TestDiffIsSerial(t *testing.T) {
	cases := []struct {
		a, b Tag
		want int32
	}{
		{5, 5, 0},
		{6, 5, 1},
		{5, 6, -1},
		{0, tagMask, 1},  // wrap: 0 follows the largest tag
		{tagMask, 0, -1}, // and the largest tag precedes 0
		{1 << (TagBits - 1), 0, -(1 << (TagBits - 1))},
		{1<<(TagBits-1) - 1, 0, 1<<(TagBits-1) - 1},
	}
	for _, c := range cases {
		require.Equal(t, c.want, Diff(c.a, c.b), "Diff(%d,%d)", c.a, c.b)
	}
}

func FuzzPack(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(int64(-1), int64(MaxCount))
	f.Add(int64(math.MaxInt64), int64(1))
	f.Add(int64(math.MinInt64), int64(MaxCount-1))
	f.Add(int64(1<<TagBits), int64(12345))
	f.Fuzz(func(t *testing.T, epoch, count int64) {
		if count < 0 || count > MaxCount {
			return
		}
		tg := TagOf(epoch)
		w := Word(tg, count)
		if TagOfWord(w) != tg || CountOfWord(w) != count {
			t.Fatalf("round trip of (%d,%d): got (%d,%d)", tg, count, TagOfWord(w), CountOfWord(w))
		}
		if TagOf(epoch+1) != (TagOf(epoch)+1)&tagMask {
			t.Fatalf("TagOf not consecutive at %d", epoch)
		}
		if d := Diff(TagOf(epoch+1), tg); d != 1 {
			t.Fatalf("Diff(next, this) = %d at epoch %d", d, epoch)
		}
		if Diff(tg, tg) != 0 {
			t.Fatal("Diff(x,x) != 0")
		}
	})
}
