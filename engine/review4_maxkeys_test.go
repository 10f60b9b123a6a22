package engine_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Reserve/Cancel/AllowAll on new keys at MaxKeys from many goroutines,
// with Sweep reclaiming: Len never above the cap, and no admitted
// reservation for a key beyond the cap.
func TestReview4MaxKeysReserveStorm(t *testing.T) {
	clk := engine.NewManualClock(t13)
	const cap = 16
	e := new13(t, engine.Config{Limit: 3, Window: time.Millisecond, SubWindows: 1, Clock: clk, MaxKeys: cap, SweepInterval: time.Hour})
	var over atomic.Int64
	stop := make(chan struct{})
	var mon sync.WaitGroup
	mon.Add(1)
	go func() {
		defer mon.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if l := e.Len(); l > cap {
				over.Store(l)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				k := fmt.Sprint("k", (g*7919+i)%64)
				switch i % 4 {
				case 0:
					r := e.Reserve(k, 1)
					r.Cancel()
				case 1:
					engine.AllowAll(time.Unix(0, clk.UnixNano()), engine.Request{Engine: e, Key: k, N: 1}, engine.Request{Engine: e, Key: k + "x", N: 2})
				case 2:
					if g == 0 {
						clk.Advance(time.Millisecond)
						e.Sweep()
					}
				default:
					e.AllowN(k, 1)
				}
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	mon.Wait()
	if over.Load() > 0 {
		t.Fatalf("Len read %d > MaxKeys %d", over.Load(), cap)
	}
	if l := e.Len(); l > cap {
		t.Fatalf("Len %d", l)
	}
}
