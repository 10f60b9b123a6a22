package engine_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestReview4ManualClockAfter(t *testing.T) {
	clk := engine.NewManualClock(t13)
	ch0, stop0 := clk.After(0)
	if !closed(ch0) || clk.Waits() != 0 {
		t.Fatal("After(0)")
	}
	stop0()
	chn, _ := clk.After(-time.Second)
	if !closed(chn) {
		t.Fatal("After(<0)")
	}
	ch, stop := clk.After(time.Second)
	if closed(ch) || clk.Waits() != 1 {
		t.Fatal("After(1s)")
	}
	clk.Advance(time.Second - 1)
	if closed(ch) {
		t.Fatal("early")
	}
	clk.Set(t13) // backwards
	clk.Advance(time.Second - 1)
	if closed(ch) {
		t.Fatal("early after set back")
	}
	clk.Advance(1)
	if !closed(ch) || clk.Waits() != 0 {
		t.Fatal("not closed at its end")
	}
	stop()
	stop()
	ch2, stop2 := clk.After(time.Hour)
	stop2()
	stop2()
	if clk.Waits() != 0 || closed(ch2) {
		t.Fatalf("stop: waits %d", clk.Waits())
	}
	// A long wait must not wrap around int64.
	ch3, stop3 := clk.After(math.MaxInt64)
	defer stop3()
	clk.Advance(time.Nanosecond)
	if closed(ch3) {
		t.Errorf("After(MaxInt64) closed after 1ns: the end wrapped around int64")
	}
	ch4, stop4 := clk.After(engine.Never)
	defer stop4()
	clk.Advance(time.Hour)
	if closed(ch4) {
		t.Errorf("After(Never) closed after an hour")
	}
}

func TestReview4ManualClockConcurrent(t *testing.T) {
	clk := engine.NewManualClock(t13)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				ch, stop := clk.After(time.Duration(1 + i%7))
				if i%3 == 0 {
					stop()
					continue
				}
				clk.Advance(time.Duration(i % 5))
				if i%2 == 0 {
					<-ch
				}
				stop()
			}
		}(g)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				clk.Advance(1)
			}
		}
	}()
	wg.Wait()
	close(done)
	if clk.Waits() != 0 {
		t.Errorf("waits left: %d", clk.Waits())
	}
}
