package engine_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A KeyLimit that consults the engine itself (reads another key's
// Remaining: n = 0 creates nothing). Nothing in the docs forbids it; it
// must not deadlock. (Doubtful as a promise: reentrancy is not documented
// either way.)
func TestReview5KeyLimitReentrant(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			var e atomic.Pointer[engine.Engine]
			eng := advNew(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, DisableEviction: true, Shards: 1, KeyLimit: func(key string) int64 {
				if len(key) > 0 && key[0] == 'k' {
					e.Load().AllowAt("base"+key, 1, adv5T0)
					e.Load().AllowAt("base", 0, adv5T0)
				}
				return 0
			}})
			e.Store(eng)
			eng.AllowAt("base", 1, adv5T0)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < 500; i++ {
					engine.AllowAll(adv5T0, engine.Request{Engine: eng, Key: fmt.Sprint("k", i), N: 1}, engine.Request{Engine: eng, Key: "base", N: 0})
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("deadlock: KeyLimit calling the engine")
			}
		})
	}
}
