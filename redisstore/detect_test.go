package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// outageKind is one way Redis stops answering, started by a test and ended
// by the function start returns; a bounded one (DEBUG SLEEP) ends by
// itself after bounded, and end waits for it.
type outageKind struct {
	name    string
	proxied bool // the client reaches Redis through the test's proxy
	bounded time.Duration
	start   func(t *testing.T, s *redistest.Server, p *proxy) (end func())
}

var outageKinds = []outageKind{
	{name: "SIGSTOP", start: func(t *testing.T, s *redistest.Server, _ *proxy) func() { return stall(t, s) }},
	{name: "kill", start: func(_ *testing.T, s *redistest.Server, _ *proxy) func() { s.Kill(); return s.Start }},
	// CLIENT PAUSE ALL holds CLIENT UNPAUSE too: it ends by itself.
	{name: "CLIENT PAUSE ALL", bounded: 3 * time.Second, start: func(t *testing.T, s *redistest.Server, _ *proxy) func() {
		return clientPause(t, s, 3000, "ALL")
	}},
	{name: "CLIENT PAUSE WRITE", start: func(t *testing.T, s *redistest.Server, _ *proxy) func() { return clientPause(t, s, 60_000, "WRITE") }},
	{name: "DEBUG SLEEP", bounded: 3 * time.Second, start: func(t *testing.T, s *redistest.Server, _ *proxy) func() {
		done := make(chan error, 1)
		go func() {
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: time.Minute})
			defer c.Close()
			done <- c.Do(context.Background(), "DEBUG", "SLEEP", "3").Err()
		}()
		return func() {
			if err := <-done; err != nil {
				t.Errorf("DEBUG SLEEP: %v", err)
			}
		}
	}},
	{name: "blackhole", proxied: true, start: func(_ *testing.T, _ *redistest.Server, p *proxy) func() { return p.blackhole() }},
}

// clientPause pauses s's clients for ms milliseconds (mode ALL or WRITE:
// the script may write, so both hold every decision); the returned
// function unpauses them (WRITE) or waits for the pause to end (ALL).
func clientPause(t *testing.T, s *redistest.Server, ms int, mode string) func() {
	t.Helper()
	admin := client(t, s)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", ms, mode).Err(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if mode == "WRITE" {
			if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Errorf("CLIENT UNPAUSE: %v", err)
			}
		}
		waitUntil(t, "the end of CLIENT PAUSE", func() bool {
			cx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return admin.Eval(cx, "redis.call('SET', KEYS[1], '1') return 1", []string{"unpaused"}).Err() == nil
		}, func() any { return "paused" })
	}
}

// processTime measures the time this process had, as the confirmation
// counts it (liveness.go): ticks of confirmTick, each credited at most
// twice its length. A test reads it to tell whether a finite outage gave
// the limiter enough of its own time to be detected.
type processTime struct {
	credited atomic.Int64
	stop     chan struct{}
	done     chan struct{}
}

func startProcessTime() *processTime {
	pt := &processTime{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(pt.done)
		tick := time.NewTicker(confirmTick)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-pt.stop:
				return
			case <-tick.C:
				now := time.Now()
				pt.credited.Add(int64(min(now.Sub(last), 2*confirmTick)))
				last = now
			}
		}
	}()
	return pt
}

func (pt *processTime) end() time.Duration {
	close(pt.stop)
	<-pt.done
	return time.Duration(pt.credited.Load())
}

// Every kind of outage is detected: SIGSTOP, a kill, CLIENT PAUSE (ALL and
// WRITE), DEBUG SLEEP and a path that drops packets, in the plain mode
// (callers with 20 ms deadlines and callers without, ReadTimeout 1 s) and
// the hybrid mode (its flushes). The breaker (the failure state) must
// open while the outage lasts, and close after it. The time from the
// outage's start to the opening is logged (README "Outages");
// the verdict waits up to hangBound, except for DEBUG SLEEP, which ends by
// itself: it must be detected before it ends unless this process had less
// than a second of its own time (processTime) during it.
func TestOutageKindsDetected(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		mode := "plain"
		if hybrid {
			mode = "hybrid"
		}
		for _, kind := range outageKinds {
			t.Run(mode+"/"+kind.name, func(t *testing.T) {
				s := redistest.Start(t)
				p := startProxy(t, s.Addr())
				addr := s.Addr()
				if kind.proxied {
					addr = p.addr()
				}
				c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, PoolSize: 64,
					DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
				defer c.Close()
				opts := []Option{}
				if hybrid {
					opts = append(opts, WithHybrid(5*time.Millisecond, 10))
				}
				l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
				br := func() *breaker {
					if hybrid {
						return l.hyb.br
					}
					return l.br.breaker
				}()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for i := range 12 {
					wg.Go(func() {
						key := fmt.Sprint("k", i)
						for {
							select {
							case <-stop:
								return
							default:
							}
							cx, cancel := context.Background(), context.CancelFunc(func() {})
							if i >= 4 {
								cx, cancel = context.WithTimeout(cx, 20*time.Millisecond)
							}
							_, err := l.AllowN(cx, key, 1)
							cancel()
							if errors.Is(err, ErrUnavailable) {
								time.Sleep(time.Millisecond)
							}
						}
					})
				}
				waitUntil(t, "decisions", func() bool {
					st := l.Stats()
					return st.RedisDecisions+st.LocalDecisions > 200
				}, func() any { return l.Stats() })
				if st := l.Stats(); st.BreakerOpens != 0 {
					t.Fatalf("the breaker opened before the outage: %+v", st)
				}
				pt := startProcessTime()
				began := time.Now()
				end := kind.start(t, s, p)
				var detected time.Duration
				if kind.bounded > 0 {
					for br.err() == nil && time.Since(began) < kind.bounded {
						time.Sleep(time.Millisecond)
					}
					if br.err() != nil {
						detected = time.Since(began)
					}
				} else {
					waitUntil(t, "the outage's detection", func() bool { return br.err() != nil }, func() any { return l.Stats() })
					detected = time.Since(began)
				}
				had := pt.end()
				st := l.Stats()
				end()
				switch {
				case detected > 0:
					t.Logf("%s %s: open %v after the outage began (the process had %v of its own time then); %+v",
						mode, kind.name, detected.Round(time.Millisecond), had.Round(time.Millisecond), st)
				case had >= time.Second:
					t.Errorf("%s %s: not detected in %v, of which this process had %v of its own time: %+v", mode, kind.name, kind.bounded, had, l.Stats())
				default:
					t.Logf("%s %s: not detected in %v, but this process had only %v of its own time: no verdict", mode, kind.name, kind.bounded, had)
				}
				waitUntil(t, "recovery after the outage", func() bool { return br.err() == nil }, func() any { return l.Stats() })
				before := l.Stats()
				waitUntil(t, "decisions after the recovery", func() bool {
					st := l.Stats()
					return st.RedisDecisions+st.LocalDecisions > before.RedisDecisions+before.LocalDecisions+100
				}, func() any { return l.Stats() })
				close(stop)
				wg.Wait()
			})
		}
	}
}

// Killed connections on a healthy server are no outage: a flood of callers
// on a full key under FailOpen while another client kills every other
// client's connection (CLIENT KILL TYPE normal) every 20 ms. The calls on
// a killed connection get no reply, and Redis answers the confirmation:
// they are answered ErrNoReply with nothing admitted, no breaker opens,
// and nothing is admitted past the limit. Before, each lost connection
// opened the breaker, and FailOpen admitted every call until a probe
// closed it: 10,835,166 calls (BreakerOpens 5) in the plain mode, 209,609
// in the hybrid mode.
func TestKilledConnectionsAreNoOutage(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 64})
			defer c.Close()
			opts := []Option{WithFailurePolicy(FailOpen)}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			if d, err := l.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
				t.Fatalf("filling the key: %+v %v", d, err)
			}
			admin := client(t, s)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var kills atomic.Int64
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					if n, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int64(); err == nil {
						kills.Add(n)
					}
				}
			})
			var admitted, unavailable, noReply, calls atomic.Int64
			for i := range 32 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						cx, cancel := context.Background(), context.CancelFunc(func() {})
						if i%2 == 1 {
							cx, cancel = context.WithTimeout(cx, 50*time.Millisecond)
						}
						d, err := l.AllowN(cx, "k", 1)
						cancel()
						calls.Add(1)
						if d.Allowed {
							admitted.Add(1)
						}
						switch {
						case errors.Is(err, ErrUnavailable):
							unavailable.Add(1)
						case errors.Is(err, ErrNoReply):
							noReply.Add(1)
						}
					}
				})
			}
			time.Sleep(1500 * time.Millisecond)
			close(stop)
			wg.Wait()
			st := l.Stats()
			t.Logf("%d calls, %d admitted, %d ErrUnavailable, %d ErrNoReply; %d connections killed; %+v", calls.Load(), admitted.Load(), unavailable.Load(), noReply.Load(), kills.Load(), st)
			if kills.Load() == 0 {
				t.Fatal("no connection was killed")
			}
			if admitted.Load() != 0 || unavailable.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
				t.Errorf("killed connections on a healthy server were taken for an outage: %d admitted, %d policy answers, %+v", admitted.Load(), unavailable.Load(), st)
			}
		})
	}
}

// An outage during a flood is still detected: the busy-process flood
// (TestBusyProcessIsNoOutage's, FailClosed, a key far from its limit) with
// redis-server stopped (SIGSTOP) in its middle. The process is short of
// CPU, yet Redis's silence is confirmed and the breaker (the failure
// state) opens; the time is logged.
func TestOutageDetectedUnderFlood(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: time.Second})
			defer c.Close()
			opts := []Option{}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			br := func() *breaker {
				if hybrid {
					return l.hyb.br
				}
				return l.br.breaker
			}()
			done := make(chan *floodTally)
			go func() { done <- flood(l, "k", false, 3*time.Second) }()
			time.Sleep(500 * time.Millisecond)
			if st := l.Stats(); st.BreakerOpens != 0 {
				t.Fatalf("the breaker opened before the outage: %+v", st)
			}
			began := time.Now()
			resume := stall(t, s)
			waitUntil(t, "the outage's detection under the flood", func() bool { return br.err() != nil }, func() any { return l.Stats() })
			detected := time.Since(began)
			resume()
			ft := <-done
			t.Logf("detected %v after the stall, under the flood; %d calls, %d policy answers; %+v", detected.Round(time.Millisecond), ft.calls.Load(), ft.unavailable.Load(), l.Stats())
		})
	}
}

// A server that pauses for less than the confirmation's budget is late,
// not down: CLIENT PAUSE of 150 ms every 400 ms (a fork, a slow command),
// under a FailOpen flood of callers with short deadlines on a full key.
// The pauses raise suspicions (callers' deadlines pass while round trips
// go unanswered for 100 ms), and each confirmation ends with the pause:
// no breaker opens, nothing is admitted. Before, each pause opened the
// breaker (BreakerOpens 5), and FailOpen admitted 1,124,392 calls. The
// process's time runs no faster than real time, so a pause of 150 ms is
// within the budget (250 ms of it) on any machine.
func TestShortPausesAreNoOutage(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 64, ReadTimeout: 2 * time.Second})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithFailurePolicy(FailOpen))
	if d, err := l.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
		t.Fatalf("filling the key: %+v %v", d, err)
	}
	admin := client(t, s)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var admitted, unavailable, calls atomic.Int64
	for i := range 32 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%5)*time.Millisecond)
				d, err := l.AllowN(cx, "k", 1)
				cancel()
				calls.Add(1)
				if d.Allowed {
					admitted.Add(1)
				}
				if errors.Is(err, ErrUnavailable) {
					unavailable.Add(1)
				}
			}
		})
	}
	pauses := 0
	for range 5 {
		time.Sleep(250 * time.Millisecond)
		if err := admin.Do(ctx, "CLIENT", "PAUSE", 150, "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		pauses++
		time.Sleep(150 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	st := l.Stats()
	t.Logf("%d pauses of 150 ms; %d calls, %d admitted, %d policy answers; %+v", pauses, calls.Load(), admitted.Load(), unavailable.Load(), st)
	if admitted.Load() != 0 || unavailable.Load() != 0 || st.BreakerOpens != 0 {
		t.Errorf("pauses shorter than the budget were taken for an outage: %d admitted, %d policy answers, %+v", admitted.Load(), unavailable.Load(), st)
	}
}
