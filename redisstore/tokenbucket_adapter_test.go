package redisstore

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The httplimit middleware over a token bucket on Redis: a tenant gets its
// burst, then 429 with Retry-After the exact wait for one more unit (one
// emission interval after a full bucket was spent), rounded up to seconds.
func TestTokenBucketMiddleware(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Burst: 3, Window: time.Hour})
	m, err := httplimit.NewMiddleware(l, httplimit.WithKey(httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for i, want := range []int{200, 200, 200, 429, 429} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Tenant", "t")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") != "3600" {
			t.Fatalf("request %d: Retry-After %q, want 3600", i, resp.Header.Get("Retry-After"))
		}
	}
}
