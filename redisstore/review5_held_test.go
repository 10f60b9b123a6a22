package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Held calls never reach Redis: callers of all kinds, each on its own key,
// keep arriving during a stall (ReadTimeout 300 ms); every caller answered
// "breaker is open" or "counted nothing" must find its key empty once the
// server resumes.
func TestReview5HeldNeverSent(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "warm", 1); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			s.Signal(syscall.SIGCONT)
		}
	}()
	var mu sync.Mutex
	nothing := map[string]string{}
	var all []string
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for j := range 40 {
				key := fmt.Sprintf("h%d-%d", g, j)
				var cx context.Context = context.Background()
				cancel := func() {}
				switch (g + j) % 3 {
				case 1:
					cx, cancel = context.WithTimeout(cx, time.Minute)
				case 2:
					var cf context.CancelFunc
					cx, cf = context.WithCancel(cx)
					tm := time.AfterFunc(100*time.Millisecond, cf)
					cancel = func() { tm.Stop(); cf() }
				}
				_, err := l.AllowN(cx, key, 1)
				cancel()
				mu.Lock()
				all = append(all, key)
				if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.Canceled) { // the 100 ms cancels: the caller's, not Redis's
					t.Errorf("%s: %v", key, err)
				}
				if err != nil && (strings.Contains(err.Error(), "breaker is open") || strings.Contains(err.Error(), "counted nothing")) {
					nothing[key] = err.Error()
				}
				mu.Unlock()
				time.Sleep(time.Duration(j%5) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	s.Signal(syscall.SIGCONT)
	resumed = true
	l.batch.wait()
	time.Sleep(100 * time.Millisecond)
	bad := 0
	for k, e := range nothing {
		if got := storedUnits(t, c, l, k); got != 0 {
			bad++
			if bad < 4 {
				t.Errorf("%s answered %q but Redis holds %d", k, e, got)
			}
		}
	}
	t.Logf("%d calls, %d answered held/counted-nothing, %d of those counted; %+v", len(all), len(nothing), bad, l.Stats())
}
