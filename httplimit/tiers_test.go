package httplimit

import (
	"net/http"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

func TestTiersPerTenantAndSwap(t *testing.T) {
	p, err := NewTiers(2, map[string]int64{"pro": 4})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := newEngine(t, engine.Config{KeyLimit: p.KeyLimit})
	tier := KeyFunc(func(r *http.Request) (string, error) {
		if r.Header.Get("X-Tenant") == "acme" {
			return "pro", nil
		}
		return "free", nil
	})
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
	wantHeader(t, w.Header(), "RateLimit-Policy", `"default";q=1;w=10`)
}

// TestTierLimitsAreValidated: a limit of −1 or above MaxLimit used to be
// accepted, and every request of that tier got a 500. Now NewTiers and
// Swap refuse it, and a refused Swap changes nothing.
func TestTierLimitsAreValidated(t *testing.T) {
	for _, c := range []struct {
		def   int64
		table map[string]int64
		want  string
	}{
		{-1, nil, "httplimit: NewTiers default limit = -1, want 0 (the engine's Config.Limit) or 1 … 1099511627775"},
		{engine.MaxLimit + 1, nil, "httplimit: NewTiers default limit = 1099511627776, want 0 (the engine's Config.Limit) or 1 … 1099511627775"},
		{0, map[string]int64{"free": -1}, `httplimit: NewTiers: tenant "free" limit = -1, want 1 … 1099511627775`},
		{0, map[string]int64{"free": 0}, `httplimit: NewTiers: tenant "free" limit = 0, want 1 … 1099511627775`},
		{0, map[string]int64{"pro": engine.MaxLimit + 1}, `httplimit: NewTiers: tenant "pro" limit = 1099511627776, want 1 … 1099511627775`},
	} {
		if p, err := NewTiers(c.def, c.table); err == nil || err.Error() != c.want || p != nil {
			t.Errorf("NewTiers(%d, %v): %v, want %q", c.def, c.table, err, c.want)
		}
	}

	p, err := NewTiers(0, map[string]int64{"free": 2})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := newEngine(t, engine.Config{KeyLimit: p.KeyLimit})
	h := New(e, WithKey(Compose(KeyByHeader("X-Tier", MissingReject), KeyByIP(64))))(okHandler)
	for _, table := range []map[string]int64{{"free": engine.MaxLimit + 1}, {"free": -1}} {
		if err := p.Swap(table, e); err == nil {
			t.Fatalf("Swap(%v) accepted", table)
		}
		if err := p.Set("free", table["free"], e); err == nil {
			t.Fatalf("Set(%v) accepted", table)
		}
	}
	if l, _ := p.Limit("free"); l != 2 {
		t.Fatalf("a refused Swap changed the table: free = %d", l)
	}
	// A new client of the tier is served with the old limit, not a 500.
	w := do(h, "192.0.2.9:1", func(r *http.Request) { r.Header.Set("X-Tier", "free") })
	if w.Code != 200 {
		t.Fatalf("new client after a refused Swap: %d %q", w.Code, w.Body.String())
	}
	wantHeader(t, w.Header(), "RateLimit-Policy", `"default";q=2;w=10`)

	// A SlidingLog engine caps limits lower: Swap checks against it.
	lp, _ := NewTiers(0, nil)
	le, _ := newEngine(t, engine.Config{Algorithm: engine.SlidingLog, KeyLimit: lp.KeyLimit})
	if err := lp.Set("big", engine.DefaultMaxLogLimit+1, le); err == nil || err.Error() != `httplimit: Swap: tenant "big" limit = 10001, want 1 … 10000` {
		t.Fatalf("SlidingLog cap: %v", err)
	}
}
