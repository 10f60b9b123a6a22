// Command deadstart measures what a service sees when Redis is down as it
// starts: how long redisstore.New, Limiter.Ping and the first decisions
// take, and what they return, against a closed port and against a server
// that accepts connections and never answers (a stopped process, a path
// that drops packets), with go-redis's default options and with the
// options redisstore's README recommends.
//
//	go run ./cmd/deadstart        # from redisstore/
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
)

// logCount counts go-redis's log lines (one per failed dial, and more).
type logCount struct{ n atomic.Int64 }

func (l *logCount) Printf(context.Context, string, ...any) { l.n.Add(1) }

// recommended is the README's quick start client for addr.
func recommended(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           250 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		PoolTimeout:           500 * time.Millisecond,
		ContextTimeoutEnabled: true,
	}
}

func main() {
	logs := &logCount{}
	redis.SetLogger(logs)
	closed, err := closedPort()
	if err != nil {
		fail(err)
	}
	silent, stop, err := silentServer()
	if err != nil {
		fail(err)
	}
	defer stop()
	fmt.Println("what a service sees when Redis is down at start-up (policy FailClosed, the default breaker)")
	for _, target := range []struct{ name, addr string }{{"closed port", closed}, {"silent server", silent}} {
		for _, opts := range []struct {
			name string
			o    *redis.Options
		}{{"go-redis defaults", &redis.Options{Addr: target.addr}}, {"recommended options", recommended(target.addr)}} {
			fmt.Printf("\n%s, %s:\n", target.name, opts.name)
			run(opts.o, logs)
		}
	}
}

func run(o *redis.Options, logs *logCount) {
	rdb := redis.NewClient(o)
	defer rdb.Close()
	var hook atomic.Int64
	logs.n.Store(0)
	t0 := time.Now()
	l, err := redisstore.New(rdb, engine.Config{Limit: 10, Window: time.Second}, redisstore.WithOnError(func(error) { hook.Add(1) }))
	fmt.Printf("  New            %10v  err=%v\n", time.Since(t0).Round(time.Microsecond), err)
	if err != nil {
		return
	}
	defer l.Close()
	t0 = time.Now()
	err = l.Ping(context.Background())
	fmt.Printf("  Ping           %10v  err=%v\n", time.Since(t0).Round(time.Microsecond), err)
	for i, d := range []time.Duration{0, 100 * time.Millisecond, 0} {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		what := "no deadline"
		if d > 0 {
			ctx, cancel = context.WithTimeout(ctx, d)
			what = "deadline " + d.String()
		}
		t0 = time.Now()
		dec, err := l.AllowN(ctx, "tenant", 1)
		cancel()
		fmt.Printf("  AllowN #%d (%s) %10v  allowed=%v unavailable=%v err=%v\n", i+1, what, time.Since(t0).Round(time.Microsecond),
			dec.Allowed, errors.Is(err, redisstore.ErrUnavailable), err)
	}
	fmt.Printf("  go-redis log lines %d, OnError calls %d, %+v\n", logs.n.Load(), hook.Load(), l.Stats())
}

// closedPort returns a loopback address nothing listens on.
func closedPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// silentServer accepts connections and never answers.
func silentServer() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never read
		}
	}()
	return ln.Addr().String(), func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	}, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "deadstart:", err)
	os.Exit(1)
}
