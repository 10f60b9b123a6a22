package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// The recipes of docs/recipes.md that need no Redis, each checked by its
// output. The engines read a manual clock, so that the output is fixed.

// An API key in a header; a request without one is keyed by its client IP
// instead, or refused.
func ExampleKeyByHeader() {
	byKey := httplimit.KeyByHeader("X-API-Key", httplimit.MissingFallback(httplimit.KeyByIP(64)))
	r := httptest.NewRequest("GET", "/", nil) // from 192.0.2.1
	r.Header.Set("X-API-Key", "key-123")
	fmt.Println(byKey.Of(r))
	r.Header.Del("X-API-Key")
	fmt.Println(byKey.Of(r))
	_, err := httplimit.KeyByHeader("X-API-Key", httplimit.MissingReject).Of(r) // the middleware answers 400
	fmt.Println(err)
	// Output:
	// key-123 <nil>
	// 192.0.2.1 <nil>
	// httplimit: missing header X-Api-Key
}

// Per-IP plus per-tenant in one middleware: a request must fit both, and
// one refused by either is charged to neither (over engines, all or
// nothing).
func ExampleNewMulti() {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	perIP, _ := engine.New(engine.Config{Limit: 2, Window: time.Minute, Clock: clk})
	defer perIP.Close()
	perTenant, _ := engine.New(engine.Config{Limit: 3, Window: time.Minute, Clock: clk})
	defer perTenant.Close()
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "ip", Limiter: perIP, Key: httplimit.KeyByIP(64)},
		{Name: "tenant", Limiter: perTenant, Key: httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)},
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = ip + ":40000"
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(ip, w.Code, strings.Join(w.Header().Values("RateLimit"), ", "))
	}
	// The third request is refused by "ip" and not charged to "tenant";
	// the last is refused by "tenant", and not charged to "ip" (r=2).
	// Output:
	// 192.0.2.1 200 "ip";r=1;t=66, "tenant";r=2;t=66
	// 192.0.2.1 200 "ip";r=0;t=66, "tenant";r=1;t=66
	// 192.0.2.1 429 "ip";r=0;t=61
	// 192.0.2.2 200 "ip";r=1;t=66, "tenant";r=0;t=66
	// 192.0.2.3 429 "ip";r=2;t=66, "tenant";r=0;t=60
}

// A global limit beside per-key ones: every request also counts under one
// key shared by all, which caps the service's total whatever the number
// of clients.
func ExampleNewMulti_global() {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	perIP, _ := engine.New(engine.Config{Limit: 2, Window: time.Second, Clock: clk})
	defer perIP.Close()
	global, _ := engine.New(engine.Config{Limit: 5, Window: time.Second, Clock: clk})
	defer global.Close()
	all := httplimit.KeyFunc(func(*http.Request) (string, error) { return "all", nil })
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "ip", Limiter: perIP}, // the zero Key: KeyByIP(64)
		{Name: "global", Limiter: global, Key: all},
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.2", "192.0.2.3", "192.0.2.4"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = ip + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(ip, w.Code)
	}
	// Output:
	// 192.0.2.1 200
	// 192.0.2.1 200
	// 192.0.2.1 429
	// 192.0.2.2 200
	// 192.0.2.2 200
	// 192.0.2.3 200
	// 192.0.2.4 429
}

// Health checks and CORS preflights are not counted: a load balancer's
// probes must not spend clients' quota, and a browser sends a preflight
// (OPTIONS with Access-Control-Request-Method) before each cross-origin
// request it makes.
func ExampleWithExempt() {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	e, _ := engine.New(engine.Config{Limit: 1, Window: time.Minute, Clock: clk})
	defer e.Close()
	m, err := httplimit.NewMiddleware(e, httplimit.WithExempt(func(r *http.Request) bool {
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		return preflight || r.URL.Path == "/healthz"
	}))
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(method, path string, preflight bool) {
		r := httptest.NewRequest(method, path, nil)
		if preflight {
			r.Header.Set("Access-Control-Request-Method", "POST")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(method, path, w.Code)
	}
	do("GET", "/", false)
	do("GET", "/", false)        // the one unit is spent
	do("GET", "/healthz", false) // exempt
	do("OPTIONS", "/", true)     // a preflight: exempt
	do("OPTIONS", "/", false)    // a plain OPTIONS counts like any method
	// Output:
	// GET / 200
	// GET / 429
	// GET /healthz 200
	// OPTIONS / 200
	// OPTIONS / 429
}
