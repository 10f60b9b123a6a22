// Command grpcserver is a runnable example of packages grpclimit and
// promlimit: a gRPC greeter limited per tenant (the x-tenant metadata, or
// the peer's IP without it), a method that costs more, health checks and
// reflection exempt, and Prometheus metrics through client_golang.
//
//	go run .     # gRPC on 127.0.0.1:50051, metrics on http://127.0.0.1:9090/metrics
//	grpcurl -plaintext -v -H 'x-tenant: acme' -d '"ann"' 127.0.0.1:50051 ringlimit.example.Greeter/Hello
//	grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check      # exempt
//	curl -s http://127.0.0.1:9090/metrics | grep ^ringlimit_
//
// It is its own module (examples/grpcserver/go.mod) because it brings
// grpclimit (gRPC) and promlimit (client_golang) together, and neither
// should depend on the other; run it from this directory.
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
	exitFailure = 1 // a failure at run time: a port is taken
	exitUsage   = 2 // bad flags, reported with the usage, as package flag does
)

// run parses args, serves until ctx is done, and returns the exit code.
// Nothing is logged as listening before both listeners are open.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	logger := log.New(stderr, "", log.LstdFlags)
	fs := flag.NewFlagSet("grpcserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:50051", "gRPC listen address host:port (loopback by default)")
	metricsAddr := fs.String("metrics", "127.0.0.1:9090", "metrics listen address host:port, or \"\" for none")
	var l limits
	fs.Int64Var(&l.Limit, "limit", 5, "calls per window per tenant (or IP), 1 … engine.MaxLimit")
	fs.DurationVar(&l.Window, "window", 10*time.Second, "window length, > 0")
	fs.Int64Var(&l.ReportCost, "report-cost", 3, "units a Report call costs, 0 … -limit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usage := func(err error) int {
		fmt.Fprintf(stderr, "grpcserver: %v\n", err)
		fs.Usage()
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	for _, a := range []struct{ flag, v string }{{"-addr", *addr}, {"-metrics", *metricsAddr}} {
		if a.v == "" && a.flag == "-metrics" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return usage(fmt.Errorf("%s %q: want host:port", a.flag, a.v))
		}
	}
	if err := l.check(); err != nil {
		return usage(err)
	}
	a, err := newApp(l, nil)
	if err != nil {
		return usage(err)
	}
	defer a.close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Print(err)
		return exitFailure
	}
	var hs *http.Server
	var mln net.Listener
	if *metricsAddr != "" {
		if mln, err = net.Listen("tcp", *metricsAddr); err != nil {
			_ = ln.Close()
			logger.Print(err)
			return exitFailure
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.metrics)
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	errc := make(chan error, 2)
	go func() { errc <- a.grpc.Serve(ln) }()
	metricsURL := "no metrics"
	if hs != nil {
		go func() { errc <- hs.Serve(mln) }()
		metricsURL = "metrics on http://" + mln.Addr().String() + "/metrics"
	}
	logger.Printf("listening on %s (gRPC; %d calls per %v per tenant or IP, Report costs %d; health and reflection exempt); %s",
		ln.Addr(), l.Limit, l.Window, l.ReportCost, metricsURL)

	select {
	case <-ctx.Done():
	case err := <-errc:
		logger.Print(err)
		a.grpc.Stop()
		if hs != nil {
			_ = hs.Close()
		}
		return exitFailure
	}
	a.grpc.GracefulStop()
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
	return exitOK
}
