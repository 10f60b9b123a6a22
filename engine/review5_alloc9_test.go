package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// More than 8 requests "take one slice of Reservations from the heap".
func TestReview5AllowAllAllocsHeap(t *testing.T) {
	if raceOn13 {
		t.Skip()
	}
	for _, n := range []int{9, 10, 64, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// No Audit: its drain goroutine allocates while AllocsPerRun counts.
			e := advNew(t, engine.Config{Limit: 1 << 30, Window: time.Second, DisableEviction: true})
			reqs := make([]engine.Request, n)
			for i := range reqs {
				reqs[i] = engine.Request{Engine: e, Key: fmt.Sprint("k", i%5), N: 1}
				e.AllowAt(reqs[i].Key, 1, adv5T0)
			}
			now := adv5T0
			a := testing.AllocsPerRun(100, func() {
				now = now.Add(time.Microsecond)
				engine.AllowAll(now, reqs...)
			})
			if a > 1 {
				t.Errorf("%d requests: %v allocs, want 1", n, a)
			}
		})
	}
}
