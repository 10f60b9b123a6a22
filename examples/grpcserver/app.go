package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/promlimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// limits are the example's flags.
type limits struct {
	Limit      int64
	Window     time.Duration
	ReportCost int64
}

func (l limits) check() error {
	switch {
	case l.Limit < 1 || l.Limit > engine.MaxLimit:
		return fmt.Errorf("-limit %d: want 1 … %d", l.Limit, engine.MaxLimit)
	case l.Window <= 0:
		return fmt.Errorf("-window %v: want > 0", l.Window)
	case l.ReportCost < 0 || l.ReportCost > l.Limit:
		return fmt.Errorf("-report-cost %d: want 0 … -limit (%d)", l.ReportCost, l.Limit)
	}
	return nil
}

// app is the example's server: the engine, the interceptor, the gRPC
// server and the metrics handler.
type app struct {
	engine  *engine.Engine
	limit   *grpclimit.Interceptor
	grpc    *grpc.Server
	metrics http.Handler
}

// newApp builds the app; clk is nil for the real clock (tests pass a
// ManualClock).
func newApp(l limits, clk engine.Clock) (*app, error) {
	e, err := engine.New(engine.Config{Limit: l.Limit, Window: l.Window, Clock: clk})
	if err != nil {
		return nil, err
	}
	// Each tenant (the x-tenant metadata) has its own window; a call
	// without one is keyed by its peer's IP. Report costs more. Health
	// checks and reflection are exempt by default.
	i, err := grpclimit.NewInterceptor(e,
		grpclimit.WithKey(grpclimit.KeyByMetadata("x-tenant", grpclimit.MissingFallback(grpclimit.KeyByIP(64)))),
		grpclimit.WithMethodCost(methodReport, l.ReportCost),
		grpclimit.WithPolicyName("per-tenant", 0))
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	c, err := promlimit.New(promlimit.Engine("", e), promlimit.GRPC("", i))
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		_ = e.Close()
		return nil, errors.Join(errors.New("registering the collector"), err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(i.Unary()), grpc.StreamInterceptor(i.Stream()))
	s.RegisterService(&greeterDesc, greeter{})
	healthpb.RegisterHealthServer(s, health.NewServer())
	reflection.Register(s)
	return &app{engine: e, limit: i, grpc: s, metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}

func (a *app) close() { _ = a.engine.Close() }
