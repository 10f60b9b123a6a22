package httplimit

import (
	"net/http"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

func TestPoliciesPerTenantAndSwap(t *testing.T) {
	p := NewPolicies(2, map[string]int64{"pro": 4})
	e, _ := newEngine(t, engine.Config{KeyLimit: p.KeyLimit})
	tier := func(r *http.Request) (string, error) {
		if r.Header.Get("X-Tenant") == "acme" {
			return "pro", nil
		}
		return "free", nil
	}
	h := New(e, WithKey(Compose(tier, KeyByHeader("X-Tenant", MissingReject))))(okHandler)
	req := func(tenant string) int {
		return do(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Tenant", tenant) }).Code
	}
	counts := func(tenant string) (ok int) {
		for range 10 {
			if req(tenant) == 200 {
				ok++
			}
		}
		return ok
	}
	if got := counts("acme"); got != 4 {
		t.Fatalf("pro admitted %d, want 4", got)
	}
	if got := counts("bob"); got != 2 {
		t.Fatalf("free admitted %d, want 2", got)
	}
	if p.KeyLimit("pro\x00acme") != 4 || p.KeyLimit("free") != 2 || p.KeyLimit("x\x00pro") != 2 {
		t.Fatal("KeyLimit tenant prefix")
	}
	// Raise free to 3 and pro to 6: live keys keep their counts, so bob
	// gets 1 more and acme 2 more, not a fresh window.
	if err := p.Swap(map[string]int64{"free": 3, "pro": 6}, e); err != nil {
		t.Fatal(err)
	}
	if got := counts("bob"); got != 1 {
		t.Fatalf("free after swap admitted %d, want 1", got)
	}
	if got := counts("acme"); got != 2 {
		t.Fatalf("pro after swap admitted %d, want 2", got)
	}
	// A new free tenant gets the new limit from KeyLimit.
	if got := counts("carol"); got != 3 {
		t.Fatalf("new free tenant admitted %d, want 3", got)
	}
	// Lowering pro below its count denies at once.
	if err := p.Set("pro", 1, e); err != nil {
		t.Fatal(err)
	}
	w := do(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Tenant", "acme") })
	if w.Code != 429 {
		t.Fatalf("after lowering: %d", w.Code)
	}
	wantHeader(t, w.Header(), "RateLimit-Policy", `"default";q=1`)
	if err := p.Swap(map[string]int64{"free": 0}, e); err == nil {
		t.Fatal("Swap accepted limit 0")
	}
	if l, _ := p.Limit("pro"); l != 1 {
		t.Fatal("a failed Swap changed the table")
	}
}
