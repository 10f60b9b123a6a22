package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Wait: "n == 0 is admitted at once (it records nothing)" — also for a new
// key when MaxKeys keys are held? And AllowAt(n=0) there.
func TestPeekAtMaxKeys(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk, MaxKeys: 1})
	e.Allow("a")
	d0 := e.AllowAt("b", 0, t0)
	r := e.ReserveAt("b", 0, t0)
	d, err := e.Wait(context.Background(), "b", 0)
	t.Logf("AllowAt n=0: %+v %v; Reserve n=0: %+v; Wait n=0: %+v %v", d0, d0.Reason(), r.Decision(), d, err)
	if err != nil || !d.Allowed {
		t.Errorf("Wait(n=0) on a new key at MaxKeys: %+v, %v; doc: n == 0 is admitted at once", d, err)
	}
}

// Reserve/Cancel/AllowAll on new keys at MaxKeys from many goroutines,
// with Sweep reclaiming: Len never above the cap, and no admitted
// reservation for a key beyond the cap.
func TestMaxKeysReserveStorm(t *testing.T) {
	clk := engine.NewManualClock(t0)
	const cap = 16
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Millisecond, SubWindows: 1, Clock: clk, MaxKeys: cap, SweepInterval: time.Hour})
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

// MaxKeys under concurrent creation, Sweep loops, the background
// sweeper and SetLimit; Len never above the cap; at quiescence Len equals
// the keys Range visits.
func TestMaxKeysUnderChurn(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const cap = 8
			clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
			e := newEngine(t, engine.Config{Limit: 3, Window: 10 * time.Millisecond, SubWindows: 2, Algorithm: alg, Clock: clk, MaxKeys: cap, PerKeyLimits: true, SweepInterval: time.Millisecond, Shards: 2})
			var stop atomic.Bool
			var wg sync.WaitGroup
			var over atomic.Int64
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for i := 0; i < 20000; i++ {
						k := fmt.Sprint("k", rng.IntN(40))
						switch rng.IntN(10) {
						case 0:
							clk.Advance(time.Duration(rng.Int64N(int64(15 * time.Millisecond))))
						case 1:
							e.Sweep()
						case 2:
							_ = e.SetLimit(k, 1+rng.Int64N(4))
						default:
							d := e.AllowN(k, 1)
							if !d.Allowed && d.Reason() == engine.ReasonKeysFull && d.Remaining != d.Limit {
								over.Add(1)
							}
						}
						if l := e.Len(); l > cap || l < 0 {
							over.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			stop.Store(true)
			require.Zero(t, over.Load())
			// Quiescent: stop the background sweeper too, or it may reclaim
			// keys between the count and Len.
			require.NoError(t, e.Close())
			n := int64(0)
			require.NoError(t, e.UpdateLimits(func(string, int64) int64 { n++; return 0 }))
			require.Equal(t, n, e.Len(), "Len vs keys held")
			clk.Advance(time.Hour)
			e.Sweep()
			require.Zero(t, e.Len())
		})
	}
}

// SetLimit and SetLimitAt of a key that is new while MaxKeys keys are held
// fail with an error that errors.Is reports as ErrKeysFull (it wrapped only
// the key table's own error), store nothing, and succeed once the key fits.
func TestSetLimitOfANewKeyAtMaxKeysIsErrKeysFull(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Clock: clk, MaxKeys: 1, PerKeyLimits: true})
	require.NoError(t, e.SetLimit("a", 3))
	err := e.SetLimit("b", 7)
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.ErrorIs(t, e.SetLimitAt("b", 7, t0), engine.ErrKeysFull)
	require.EqualValues(t, 1, e.Len())
	require.Equal(t, engine.ReasonKeysFull, e.AllowAt("b", 1, t0).Reason())

	clk.Advance(10 * time.Second) // a is reclaimed: b fits, with its own limit
	e.Sweep()
	require.NoError(t, e.SetLimit("b", 7))
	require.EqualValues(t, 7, e.AllowAt("b", 1, t0.Add(10*time.Second)).Limit)
}
