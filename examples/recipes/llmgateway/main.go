// Command llmgateway is a recipe of docs/recipes.md: a tokens-per-minute
// limit, the way an LLM gateway runs one. Each request reserves its
// estimated tokens before the model runs, and is settled to the tokens the
// response really used (httplimit.WithSettle and ReportCost), in one
// process or shared by every replica through Redis (-redis).
//
//	go run ./llmgateway                         # listens on 127.0.0.1:8080
//	go run ./llmgateway -redis 127.0.0.1:6379   # each tenant's budget shared through Redis
//	curl -i -H 'X-Tenant: acme' -d '{"prompt": "say hello to the world", "max_tokens": 400}' \
//	    http://127.0.0.1:8080/v1/completions
//
// The estimate is the prompt's tokens plus max_tokens (404 here), the
// usage 8: after the response, acme's budget has lost 8 tokens, not 404.
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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, serves until ctx is done, and returns the exit code:
// 0, 1 for a failure at run time, 2 for bad flags.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	logger := log.New(stderr, "", log.LstdFlags)
	fs := flag.NewFlagSet("llmgateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address host:port (loopback by default)")
	tpm := fs.Int64("tpm", 10_000, "tokens per minute per tenant, 1 … engine.MaxLimit")
	redisAddr := fs.String("redis", "", "Redis host:port: share each tenant's budget with every replica using it (default: in process)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *tpm < 1 || *tpm > engine.MaxLimit {
		fmt.Fprintf(stderr, "llmgateway: want no arguments and -tpm in 1 … %d\n", int64(engine.MaxLimit))
		fs.Usage()
		return 2
	}
	limiter, closeLimiter, err := newLimiter(*tpm, *redisAddr)
	if err != nil {
		logger.Print(err)
		return 2
	}
	defer closeLimiter()
	g, err := newGateway(limiter)
	if err != nil {
		logger.Print(err)
		return 1
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Print(err)
		return 1
	}
	srv := &http.Server{Handler: g.handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Printf("listening on http://%s (%d tokens per minute per tenant)", ln.Addr(), *tpm)
	select {
	case err := <-errc:
		logger.Print(err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// tpmConfig is a budget of tpm tokens per minute: SlidingWindowStrict, so
// that no admission ever passes it (a settled debt can, and is waited out).
func tpmConfig(tpm int64) engine.Config {
	return engine.Config{Limit: tpm, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict}
}

// newLimiter returns the tokens-per-minute limiter: in process, or on the
// Redis at redisAddr.
func newLimiter(tpm int64, redisAddr string) (any, func(), error) {
	if redisAddr == "" {
		e, err := engine.New(tpmConfig(tpm))
		if err != nil {
			return nil, nil, err
		}
		return e, func() { _ = e.Close() }, nil
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: redisAddr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 250 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	l, err := redisstore.New(rdb, tpmConfig(tpm), redisstore.WithPrefix("ringlimit:llmgateway:"))
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return l, func() { _ = l.Close(); _ = rdb.Close() }, nil
}
