package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

func ExampleNewMiddleware() {
	e, err := engine.New(engine.Config{
		Limit: 2, Window: 10 * time.Second, Algorithm: engine.FixedWindow,
		Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0)), // a fixed instant, for the output below
	})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e, httplimit.WithPolicyName("per-ip", 0)) // the window comes from e
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil) // from 192.0.2.1
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s %s Retry-After=%q\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";q=2;w=10 "per-ip";r=1;t=10 Retry-After=""
	// 200 "per-ip";q=2;w=10 "per-ip";r=0;t=10 Retry-After=""
	// 429 "per-ip";q=2;w=10 "per-ip";r=0;t=10 Retry-After="10"
}

// A misconfiguration is an error at construction, naming what is wrong.
func ExampleNewMiddleware_misconfigured() {
	e, err := engine.New(engine.Config{Limit: 2, Window: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	_, err = httplimit.NewMiddleware(e,
		httplimit.WithKey(httplimit.KeyByXForwardedFor(nil, 64)),
		httplimit.WithPolicyName("per-ip", time.Minute))
	fmt.Println(err)
	// Output:
	// httplimit: WithKey: KeyByXForwardedFor trusted is empty, want the prefixes of your reverse proxies (with no proxy, use KeyByIP)
	// httplimit: WithPolicyName window = 1m0s, but the limiter's Config().Window = 10s; pass 0 to take the limiter's
}

// Behind nginx ("proxy_set_header X-Forwarded-For
// $proxy_add_x_forwarded_for") on 10.0.0.0/8: the first address from the
// right that is not a proxy is the client.
func ExampleKeyByXForwardedFor() {
	k := httplimit.KeyByXForwardedFor([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, 64)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:41000"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.5, 10.0.0.7") // 6.6.6.6: written by the client
	fmt.Println(k.Of(r))
	// Output: 203.0.113.5 <nil>
}
