// Command httpserver is a runnable example of package httplimit: per-IP
// limiting of a public route, per-tenant limits by tier on an API, a
// Prometheus /metrics endpoint and a hot tier swap; in process, or shared
// by every instance through Redis (-redis).
//
//	go run .                                # listens on 127.0.0.1:8080
//	go run . -redis 127.0.0.1:6379          # the same routes, limits shared through Redis
//	curl -i http://127.0.0.1:8080/          # 5 per 10 s per IP, then 429
//	curl -i -H 'X-Tenant: acme' http://127.0.0.1:8080/api/hello   # tier pro
//	curl -i -H 'X-Tenant: bob'  http://127.0.0.1:8080/api/hello   # tier free
//	curl -X POST 'http://127.0.0.1:8080/admin/tier?tier=free&limit=20'
//	curl http://127.0.0.1:8080/metrics
//
// It is its own module (examples/httpserver/go.mod) because -redis needs
// go-redis, which the root module must not depend on; run it from this
// directory.
//
// The admin endpoint has no authentication: the server listens on loopback
// by default, and a real one would put the endpoint behind auth.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes of run.
const (
	exitOK      = 0
	exitFailure = 1 // a failure at run time: the port is taken, Redis does not answer
	exitUsage   = 2 // bad flags, reported with the usage, as package flag does
)

// usageError is a configuration mistake in the flags.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

// run parses args, serves until ctx is done, and returns the exit code.
// Nothing is logged as listening before the listener is open.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	logger := log.New(stderr, "", log.LstdFlags)
	fs := flag.NewFlagSet("httpserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address host:port, port 0 … 65535 (loopback by default)")
	l := limits{}
	fs.Int64Var(&l.PerIP, "limit", 5, "requests per window per IP on /, 1 … engine.MaxLimit")
	fs.DurationVar(&l.Window, "window", 10*time.Second, "window length, > 0 (a whole number of ms per sub-window with -redis)")
	fs.Int64Var(&l.Free, "free", 10, "requests per window per tenant of tier free on /api/, 1 … engine.MaxLimit")
	fs.Int64Var(&l.Pro, "pro", 50, "requests per window per tenant of tier pro on /api/, 1 … engine.MaxLimit")
	redisAddr := fs.String("redis", "", "Redis host:port: share the limits with every instance using it (default: in process)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage // fs printed the error and the usage
	}
	usage := func(err error) int {
		fmt.Fprintf(stderr, "httpserver: %v\n", err)
		fs.Usage()
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if err := checkHostPort("-addr", *addr); err != nil {
		return usage(err)
	}
	if *redisAddr != "" {
		if err := checkHostPort("-redis", *redisAddr); err != nil {
			return usage(err)
		}
	}
	if err := l.check(); err != nil {
		return usage(err)
	}

	var a *app
	var err error
	mode := "in process"
	if *redisAddr == "" {
		a, err = newLocalApp(l, nil)
	} else {
		mode = "shared through Redis at " + *redisAddr
		a, err = newRedisApp(ctx, newRedisClient(*redisAddr), redisPrefix, l)
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return usage(err)
	case err != nil:
		logger.Print(err)
		return exitFailure
	}
	defer a.close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Print(err)
		return exitFailure
	}
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Printf("listening on http://%s (/ %d per %v per IP; /api/ free %d, pro %d per tenant; %s)", ln.Addr(), l.PerIP, l.Window, l.Free, l.Pro, mode)
	select {
	case err := <-errc:
		logger.Print(err)
		return exitFailure
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Print(err)
		return exitFailure
	}
	return exitOK
}

// checkHostPort checks that s is host:port with a numeric port 0 … 65535.
func checkHostPort(flagName, s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%s %q: %v; want host:port", flagName, s, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && flagName == "-redis") {
		return fmt.Errorf("%s %q: port %q, want a number in 0 … 65535 (1 … 65535 for -redis)", flagName, s, port)
	}
	return nil
}

// redisPrefix prefixes the example's Redis keys; every instance uses the
// same, which is what makes them share the limits.
const redisPrefix = "ringlimit:httpserver:"

// newRedisClient returns a client with the options redisstore's README
// recommends: a rate limit decision should not wait seconds for a dead
// server, MaxRetries −1 never resends a script that may already have
// counted, and ContextTimeoutEnabled lets a request's deadline bound its
// round trip.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 250 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		PoolTimeout: 500 * time.Millisecond,
	})
}

// limits are the example's policies.
type limits struct {
	PerIP     int64         // on /, per client IP
	Window    time.Duration // of every policy
	Free, Pro int64         // on /api/, per tenant of each tier
}

func (l limits) check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"-limit", l.PerIP}, {"-free", l.Free}, {"-pro", l.Pro}} {
		if f.v < 1 || f.v > engine.MaxLimit {
			return fmt.Errorf("%s = %d, want 1 … %d", f.name, f.v, int64(engine.MaxLimit))
		}
	}
	if l.Window <= 0 {
		return fmt.Errorf("-window = %v, want > 0", l.Window)
	}
	return nil
}
