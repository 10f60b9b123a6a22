// Command outage measures what redisstore's callers see when Redis dies and
// comes back: it starts a redis-server on a loopback port, runs decisions
// from concurrent callers through a go-redis client with its default
// options, kills the server, restarts it on the same port, and prints the
// decision latency before, during and after the outage and the time to
// recover, with the breaker off and on.
//
//	go run ./cmd/outage                  # from redisstore/; needs redis-server
//	go run ./cmd/outage -callers 16 -outage 5s -modes on
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
)

var verbose *bool

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	callers := flag.Int("callers", 8, "concurrent callers, each deciding in a loop")
	think := flag.Duration("think", time.Millisecond, "each caller's pause after a decision (a request's other work); 0 spins, and starves redis-server and the prober of CPU on a small machine")
	keys := flag.Int("keys", 100, "distinct keys, chosen in turn")
	healthy := flag.Duration("healthy", 2*time.Second, "load before the kill")
	outage := flag.Duration("outage", 3*time.Second, "time the server stays down")
	after := flag.Duration("after", 2*time.Second, "load after the restart")
	verbose = flag.Bool("v", false, "print every OnError call, with its time since the run's start")
	modes := flag.String("modes", "off,on", "breaker modes to run, in order: off (WithBreaker(0, 0)), on (the default breaker)")
	flag.Parse()
	redis.SetLogger(quiet{}) // the pool logs every failed dial
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "outage: redis-server is not installed (Debian: apt-get install -y redis-server)")
		os.Exit(2)
	}
	fmt.Printf("callers %d (pausing %v after each decision), keys %d, healthy %v, outage %v, after %v; go-redis default options; policy FailClosed\n",
		*callers, *think, *keys, *healthy, *outage, *after)
	for _, m := range strings.Split(*modes, ",") {
		if m != "on" && m != "off" {
			fmt.Fprintf(os.Stderr, "outage: mode %q: want on or off\n", m)
			os.Exit(2)
		}
		if err := run(m == "on", *think, *callers, *keys, *healthy, *outage, *after); err != nil {
			fmt.Fprintln(os.Stderr, "outage:", err)
			os.Exit(1)
		}
	}
}

// sample is one decision: when it started (ns since the run's start), how
// long it took, and whether Redis answered it.
type sample struct {
	start, dur int64
	redis      bool
}

func run(breaker bool, think time.Duration, callers, nkeys int, healthy, outage, after time.Duration) error {
	srv, err := startServer()
	if err != nil {
		return err
	}
	defer srv.cleanup()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr}) // the defaults, on purpose
	defer rdb.Close()
	t0 := time.Now()
	var opts []redisstore.Option
	if *verbose {
		opts = append(opts, redisstore.WithOnError(func(err error) { fmt.Printf("%8v OnError: %v\n", round(time.Since(t0)), err) }))
	}
	if !breaker {
		opts = append(opts, redisstore.WithBreaker(0, 0))
	}
	l, err := redisstore.New(rdb, engine.Config{Limit: 1_000_000, Window: time.Second}, opts...)
	if err != nil {
		return err
	}
	defer l.Close()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}

	since := func() int64 { return int64(time.Since(t0)) }
	var stopped atomic.Bool
	per := make([][]sample, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			s := make([]sample, 0, 1<<16)
			for i := c; !stopped.Load(); i++ {
				st := since()
				_, err := l.AllowN(context.Background(), keys[i%nkeys], 1)
				s = append(s, sample{start: st, dur: since() - st, redis: err == nil})
				switch {
				case err == nil, errors.Is(err, redisstore.ErrUnavailable):
				case errors.Is(err, redisstore.ErrNoReply):
					// A round trip lost at the kill (EOF) whose
					// confirmation then found Redis answering: the
					// restart came within the budget (Stats().NoReply).
				default:
					fmt.Fprintln(os.Stderr, "outage: unexpected error:", err)
				}
				if think > 0 {
					time.Sleep(think)
				}
			}
			per[c] = s
		})
	}
	time.Sleep(healthy)
	killAt := since()
	srv.kill()
	time.Sleep(outage)
	restartAt := since()
	if err := srv.start(); err != nil { // returns once the server answers PING
		stopped.Store(true)
		wg.Wait()
		return err
	}
	upAt := since()
	time.Sleep(after)
	stopped.Store(true)
	wg.Wait()

	var all []sample
	for _, s := range per {
		all = append(all, s...)
	}
	slices.SortFunc(all, func(a, b sample) int { return int(a.start - b.start) })
	// The first failure a caller saw after the kill: from then on the
	// breaker (if on) answers without round trips.
	firstFail := int64(-1)
	for _, s := range all {
		if s.start+s.dur > killAt && !s.redis && (firstFail < 0 || s.start+s.dur < firstFail) {
			firstFail = s.start + s.dur
		}
	}
	// Recovery: the first decision Redis answered after the server was
	// up again (it started after the restart began).
	recovered := int64(-1)
	for _, s := range all {
		if s.redis && s.start > restartAt && (recovered < 0 || s.start+s.dur < recovered) {
			recovered = s.start + s.dur
		}
	}
	name := "breaker off (WithBreaker(0, 0))"
	if breaker {
		name = "breaker on (defaults: 10 ms, 500 ms)"
	}
	fmt.Printf("\n== %s\n", name)
	fmt.Printf("%-44s %9s %10s %9s %9s %9s\n", "phase", "decisions", "per s", "p50", "p99", "max")
	phase := func(label string, from, to int64, keep func(sample) bool) {
		if to <= from {
			fmt.Printf("%-44s %9d\n", label, 0)
			return
		}
		var d []int64
		for _, s := range all {
			if s.start >= from && s.start < to && (keep == nil || keep(s)) {
				d = append(d, s.dur)
			}
		}
		if len(d) == 0 {
			fmt.Printf("%-44s %9d\n", label, 0)
			return
		}
		slices.Sort(d)
		q := func(p float64) time.Duration { return time.Duration(d[min(len(d)-1, int(p*float64(len(d))))]) }
		rate := "-"
		if from > 0 {
			rate = fmt.Sprintf("%.0f", float64(len(d))/time.Duration(to-from).Seconds())
		}
		fmt.Printf("%-44s %9d %10s %9v %9v %9v\n", label, len(d), rate, round(q(0.5)), round(q(0.99)), round(time.Duration(d[len(d)-1])))
	}
	end := since()
	phase("healthy: the last second before the kill", killAt-int64(time.Second), killAt, func(s sample) bool { return s.start+s.dur < killAt })
	phase("in flight at the kill", 0, killAt, func(s sample) bool { return s.start+s.dur >= killAt })
	if firstFail >= 0 {
		phase("outage: started before the first failure", killAt, firstFail, nil)
		phase("outage: started after the first failure", firstFail, restartAt, nil)
	} else {
		phase("outage: started during it (none failed)", killAt, restartAt, nil)
	}
	if recovered >= 0 {
		phase("after the recovery", recovered, end, nil)
	}
	if firstFail >= 0 {
		fmt.Printf("first failure returned %v after the kill\n", round(time.Duration(firstFail-killAt)))
	} else {
		fmt.Println("first failure: none; the decisions in flight waited for the restart (go-redis's retries)")
	}
	// The server's PING is polled every millisecond on a connection of
	// its own, so a decision may be answered before it: both are given
	// from the restart's beginning.
	if recovered >= 0 {
		fmt.Printf("recovery: the first decision answered by Redis %v after its restart began (the server answered this tool's PING after %v)\n",
			round(time.Duration(recovered-restartAt)), round(time.Duration(upAt-restartAt)))
	} else {
		fmt.Println("recovery: none within the run")
	}
	st := l.Stats()
	fmt.Printf("stats: %d Redis decisions, %d policy answers, %d no replies (ErrNoReply: lost at the kill, and Redis answered again within the confirmation's budget), %d failed round trips (OnError calls), %d breaker opens\n",
		st.RedisDecisions, st.FallbackDecisions, st.NoReply, st.Failures, st.BreakerOpens)
	return nil
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 100*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Nanosecond)
}

// server is a redis-server on a loopback port, restartable on that port.
type server struct {
	addr, dir string
	cmd       *exec.Cmd
}

func startServer() (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "outage")
	if err != nil {
		return nil, err
	}
	s := &server{addr: addr, dir: dir}
	return s, s.start()
}

func (s *server) start() error {
	_, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer PING: %w", s.addr, err)
		}
	}
}

func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_, _ = s.cmd.Process.Wait()
		s.cmd = nil
	}
}

func (s *server) cleanup() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}
