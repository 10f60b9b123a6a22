package engine

import (
	"testing"
	"time"
)

func TestScrubEveryKeepsScrubsWithin2To20SubWindows(t *testing.T) {
	cases := []struct {
		pass  time.Duration
		width int64
		want  int
	}{
		{1100 * time.Millisecond, int64(100 * time.Millisecond), 16}, // the default for W = 1s
		{time.Hour, int64(time.Millisecond), 1},                      // long passes, short sub-windows
		{time.Second, int64(time.Hour), 16},                          // passes shorter than a sub-window
		{time.Duration(1 << 62), 1, 1},                               // no overflow
		{time.Duration(1<<20) * 4, 1 << 4, 4},
	}
	for _, c := range cases {
		got := scrubEvery(c.pass, c.width)
		if got != c.want {
			t.Errorf("scrubEvery(%v, %d) = %d, want %d", c.pass, c.width, got, c.want)
		}
		if perPass := int64(c.pass) / c.width; int64(got)*perPass > 1<<20 && got > 1 {
			t.Errorf("scrubEvery(%v, %d) = %d: %d sub-windows between scrubs", c.pass, c.width, got, int64(got)*perPass)
		}
	}
}
