// Command httpserver is a runnable example of package httplimit: per-IP
// limiting of a public route, per-tenant limits by tier on an API, a
// Prometheus /metrics endpoint and a hot policy swap.
//
//	go run ./examples/httpserver            # listens on 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/          # 5 per 10 s per IP, then 429
//	curl -i -H 'X-Tenant: acme' http://127.0.0.1:8080/api/hello   # tier pro
//	curl -i -H 'X-Tenant: bob'  http://127.0.0.1:8080/api/hello   # tier free
//	curl -X POST 'http://127.0.0.1:8080/admin/policy?tier=free&limit=20'
//	curl http://127.0.0.1:8080/metrics
//
// The admin endpoint has no authentication: the server listens on loopback
// by default, and a real one would put the endpoint behind auth.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// tierOf is the example's tenant directory: a real server would look the
// tenant up after authenticating it.
var tierOf = map[string]string{"acme": "pro", "globex": "pro"}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (loopback by default)")
	limit := flag.Int64("limit", 5, "requests per window per IP on /")
	window := flag.Duration("window", 10*time.Second, "window length")
	free := flag.Int64("free", 10, "requests per window per tenant of tier free on /api/")
	pro := flag.Int64("pro", 50, "requests per window per tenant of tier pro on /api/")
	flag.Parse()
	if err := run(*addr, *limit, *window, *free, *pro); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, limit int64, window time.Duration, free, pro int64) error {
	h, e, err := newHandler(engine.Config{Limit: limit, Window: window}, free, pro)
	if err != nil {
		return err
	}
	defer e.Close()

	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("listening on http://%s (/ %d per %v per IP; /api/ free %d, pro %d per tenant)", addr, limit, window, free, pro)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler builds the example's routes over a new engine configured by
// cfg (its Limit and Window are the per-IP policy of /); free and pro are
// the tiers' limits on /api/. The caller closes the engine.
func newHandler(cfg engine.Config, free, pro int64) (http.Handler, *engine.Engine, error) {
	// One engine for both routes. A key is "<tier>\x00<tenant>" on the API
	// and "ip\x00<addr>" elsewhere; Policies gives each tier its limit and
	// everything else (the "ip" prefix) the engine's Limit.
	policies, err := httplimit.NewPolicies(0, map[string]int64{"free": free, "pro": pro})
	if err != nil {
		return nil, nil, err
	}
	cfg.KeyLimit = policies.KeyLimit
	e, err := engine.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	window := cfg.Window

	byIP := httplimit.KeyByIP(64)
	tenant := httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)
	tier := func(r *http.Request) (string, error) {
		t, err := tenant.Of(r)
		if err != nil {
			return "", err
		}
		if tr, ok := tierOf[t]; ok {
			return tr, nil
		}
		return "free", nil
	}
	ipKey := httplimit.Compose(httplimit.KeyFunc(func(*http.Request) (string, error) { return "ip", nil }), byIP)
	apiKey := httplimit.Compose(httplimit.KeyFunc(tier), tenant)
	m, err := httplimit.NewMiddleware(e,
		httplimit.WithPolicy("default", 0),
		httplimit.WithKey(httplimit.KeyFunc(func(r *http.Request) (string, error) {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				return apiKey.Of(r)
			}
			return ipKey.Of(r)
		})),
		httplimit.WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
	)
	if err != nil {
		_ = e.Close()
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /{$}", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /api/hello", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := tier(r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8") // the tenant is echoed: never sniff it as HTML
		fmt.Fprintf(w, "hello %s (tier %s)\n", r.Header.Get("X-Tenant"), t)
	})))
	mux.Handle("GET /healthz", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
	mux.Handle("GET /metrics", httplimit.MetricsHandler(m, e))
	mux.HandleFunc("POST /admin/policy", func(w http.ResponseWriter, r *http.Request) {
		t := r.URL.Query().Get("tier")
		if t != "free" && t != "pro" {
			http.Error(w, "tier must be free or pro", http.StatusBadRequest)
			return
		}
		n, err := strconv.ParseInt(r.URL.Query().Get("limit"), 10, 64)
		if err != nil || n < 1 {
			http.Error(w, "limit must be an integer ≥ 1", http.StatusBadRequest)
			return
		}
		if err := policies.Set(t, n, e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "tier %s: %d per %v\n", t, n, window)
	})

	return mux, e, nil
}
