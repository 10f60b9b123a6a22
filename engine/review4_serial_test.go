package engine_test

import (
	"math/big"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

type serEnt struct {
	t, n        int64
	endSeq      int64
	r           engine.Reservation
	claimed     atomic.Bool
	cancelStart atomic.Int64
	success     atomic.Bool
}

// One reserver (so the admission order and the effective times are known:
// its times only move forward), several cancellers. At every admission,
// the units that were certainly live (never cancelled, or whose Cancel
// started after the admission returned) plus n must fit the algorithm's
// estimate: a cancel may cause false denials, never false admissions.
func TestReview4SerialReserverConcurrentCancels(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, N := range []int{1, 2, 5} {
			if (alg == engine.FixedWindow || alg == engine.SlidingLog) && N != 1 {
				continue
			}
			for round := 0; round < 4; round++ {
				runSerial(t, alg, N, uint64(round))
			}
		}
	}
}

func runSerial(t *testing.T, alg engine.Algorithm, N int, seed uint64) {
	const L = 9
	w := int64(10_000)
	cfg := engine.Config{Limit: L, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, DisableEviction: true}
	e := new13(t, cfg)
	m := newM13(cfg)
	var seq atomic.Int64
	var mu sync.Mutex
	ents := make([]*serEnt, 0, 4096)
	stop := make(chan struct{})
	var cw sync.WaitGroup
	for g := 0; g < 3; g++ {
		cw.Add(1)
		go func(g int) {
			defer cw.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)+100))
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				var en *serEnt
				if len(ents) > 0 {
					en = ents[len(ents)-1-rng.IntN(min(len(ents), 8))]
				}
				mu.Unlock()
				if en == nil || !en.claimed.CompareAndSwap(false, true) {
					continue
				}
				en.cancelStart.Store(seq.Add(1))
				if en.r.Cancel() {
					en.success.Store(true)
				}
			}
		}(g)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	now := t13.UnixNano()
	newest := int64(0)
	for i := 0; i < 3000; i++ {
		switch rng.IntN(10) {
		case 0:
			now -= rng.Int64N(2 * w)
		case 1:
			now += w * int64(rng.IntN(N+2))
		default:
			now += rng.Int64N(w / 3)
		}
		te := now
		if ep := m.epoch(now); ep < newest {
			te = newest
			if alg != engine.SlidingLog {
				te = newest * w
			}
		} else {
			newest = ep
		}
		en := &serEnt{t: te, n: 1 + rng.Int64N(3)}
		en.r = e.ReserveAt("k", en.n, time.Unix(0, now))
		en.endSeq = seq.Add(1)
		if en.r.Units() > 0 {
			mu.Lock()
			ents = append(ents, en)
			mu.Unlock()
		}
	}
	close(stop)
	cw.Wait()
	W := int64(cfg.Window)
	var falseAdmits int
	for i, en := range ents {
		m.k.ev = map[int64]int64{}
		for j := i - 1; j >= 0; j-- {
			o := ents[j]
			if o.t <= en.t-W-w {
				break
			}
			if os.Getenv("ADV13_TEETH") == "" && o.success.Load() && o.cancelStart.Load() < en.endSeq {
				continue // maybe cancelled before
			}
			m.k.ev[m.epoch(o.t)] += o.n
		}
		num, den := m.est(en.t)
		num.Add(num, new(big.Int).Mul(big.NewInt(en.n), den))
		if num.Cmp(new(big.Int).Mul(big.NewInt(L), den)) > 0 {
			falseAdmits++
			if falseAdmits < 4 {
				t.Errorf("%v N=%d seed=%d: admission #%d (n=%d at +%d) exceeds the limit over certainly-live units: est %v/%v", alg, N, seed, i, en.n, en.t-t13.UnixNano(), num, den)
			}
		}
	}
	if falseAdmits > 0 {
		t.Fatalf("%d false admissions", falseAdmits)
	}
}
