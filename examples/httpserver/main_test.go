package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestExampleServer(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	h, e, err := newHandler(engine.Config{Limit: 5, Window: 10 * time.Second, Clock: clk}, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := srv.Client()
	call := func(method, path, tenant string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	admitted := func(path, tenant string, n int) (ok int) {
		for range n {
			if code, _, _ := call("GET", path, tenant); code == 200 {
				ok++
			}
		}
		return ok
	}
	if got := admitted("/", "", 8); got != 5 {
		t.Fatalf("/ admitted %d of 8, want 5", got)
	}
	code, hdr, _ := call("GET", "/", "")
	if code != 429 || hdr.Get("Retry-After") == "" || !strings.HasPrefix(hdr.Get("RateLimit-Policy"), `"default";q=5;w=10`) {
		t.Fatalf("429: %d %v", code, hdr)
	}
	if got := admitted("/api/hello", "bob", 5); got != 2 {
		t.Fatalf("free admitted %d, want 2", got)
	}
	if got := admitted("/api/hello", "acme", 6); got != 4 {
		t.Fatalf("pro admitted %d, want 4", got)
	}
	if code, _, _ := call("GET", "/api/hello", ""); code != 400 {
		t.Fatalf("no tenant: %d, want 400", code)
	}
	if code, _, body := call("POST", "/admin/policy?tier=free&limit=3", ""); code != 200 {
		t.Fatalf("swap: %d %s", code, body)
	}
	if got := admitted("/api/hello", "bob", 5); got != 1 {
		t.Fatalf("free after swap to 3 admitted %d, want 1 (counts kept)", got)
	}
	if code, _, _ := call("POST", "/admin/policy?tier=gold&limit=3", ""); code != 400 {
		t.Fatalf("bad tier: %d", code)
	}
	if code, hdr, _ := call("GET", "/healthz", ""); code != 200 || hdr.Get("RateLimit") != "" {
		t.Fatalf("healthz: %d %v", code, hdr)
	}
	_, _, metrics := call("GET", "/metrics", "")
	for _, want := range []string{`ringlimit_requests_total{outcome="allowed"} 12`, `outcome="rejected"} 1`, "ringlimit_keys 3"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
}
