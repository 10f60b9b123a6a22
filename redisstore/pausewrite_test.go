package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// detectAfter starts a silence with begin and returns how long, from
// then, callers deciding on l (20 ms deadlines, a key far from its limit,
// FailClosed) took to get the policy's answer (ErrUnavailable), or 0 if
// none came within limit. side, if non-nil, runs beside the callers until
// the end.
func detectAfter(t *testing.T, l *Limiter, begin func(), side func(stop <-chan struct{}), limit time.Duration) time.Duration {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if side != nil {
		wg.Go(func() { side(stop) })
	}
	first := make(chan time.Time, 1)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				_, err := l.AllowN(cx, "k", 1)
				cancel()
				if errors.Is(err, ErrUnavailable) {
					select {
					case first <- time.Now():
					default:
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	begin()
	var d time.Duration
	select {
	case at := <-first:
		d = at.Sub(t0)
	case <-time.After(limit):
	}
	close(stop)
	wg.Wait()
	return d
}

// CLIENT PAUSE WRITE longer than the budget is an outage for the limiter:
// its script writes, so Redis decides nothing ("a script that writes, so
// CLIENT PAUSE WRITE holds it as it holds decisions", docs/design.md §10).
// The promise: a silent Redis (SIGSTOP, CLIENT PAUSE, DEBUG SLEEP, a path
// that drops packets) is detected about 0.1 s + the budget + 0.03 s after
// the silence begins when callers have deadlines (budget = ReadTimeout,
// here 500 ms, as the README's quick start sets it). Under a write pause
// Redis still answers reads and handshakes, which must not count as
// "Redis up": the application's own reads on the same client, or the
// reconnects of the limiter's checker when connections are killed every
// 50 ms (before the fix, never detected within the pause: each
// replacement connection's handshake counted as a reply).
func TestPauseWriteDetected(t *testing.T) {
	const pause = 4 * time.Second
	const want = 2 * time.Second // 0.1 + 0.5 + 0.03 s documented; a wide margin
	sides := []struct {
		name string
		side func(c *redis.Client, admin *redis.Client) func(stop <-chan struct{})
	}{
		{"alone", nil},
		{"app-reads-same-client", func(c, _ *redis.Client) func(stop <-chan struct{}) {
			return func(stop <-chan struct{}) {
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					_ = c.Get(context.Background(), "app:config").Err()
				}
			}
		}},
		{"connections-killed-every-50ms", killEvery(50 * time.Millisecond)},
		{"connections-killed-every-300ms", killEvery(300 * time.Millisecond)},
	}
	for _, hybrid := range []bool{false, true} {
		for _, sd := range sides {
			t.Run(fmt.Sprintf("hybrid=%v/%s", hybrid, sd.name), func(t *testing.T) {
				if hybrid && sd.name != "connections-killed-every-50ms" {
					longOnly(t)
				}
				s := redistest.Start(t)
				c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
				defer c.Close()
				admin := client(t, s)
				opts := []Option{WithFailurePolicy(FailClosed)}
				if hybrid {
					opts = append(opts, WithHybrid(5*time.Millisecond, 2))
				}
				l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
				var side func(stop <-chan struct{})
				if sd.side != nil {
					side = sd.side(c, admin)
				}
				d := detectAfter(t, l, func() {
					if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
						t.Fatal(err)
					}
				}, side, pause)
				_ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err()
				st := l.Stats()
				t.Logf("detected after %v; %+v", d, st)
				if d == 0 || d > want {
					t.Errorf("a %v CLIENT PAUSE WRITE detected after %v (0: never within the pause), want within %v", pause, d, want)
				}
			})
		}
	}
}

// killEvery kills every normal client connection but the admin's (CLIENT
// KILL TYPE normal) every d.
func killEvery(d time.Duration) func(_, admin *redis.Client) func(stop <-chan struct{}) {
	return func(_, admin *redis.Client) func(stop <-chan struct{}) {
		return func(stop <-chan struct{}) {
			for {
				select {
				case <-stop:
					return
				case <-time.After(d):
				}
				_ = admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
			}
		}
	}
}
