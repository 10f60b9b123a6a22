package httplimit

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// emptyKeys are Keys whose function gives an empty (or blank) key, each
// way a key function's result reaches the limiter.
func emptyKeys() map[string]Key {
	empty := KeyFunc(func(*http.Request) (string, error) { return "", nil })
	return map[string]Key{
		"KeyFunc":                       empty,
		"KeyFunc of white space":        KeyFunc(func(*http.Request) (string, error) { return " \t", nil }),
		"Compose, first part":           Compose(empty, KeyByIP(64)),
		"Compose, last part":            Compose(KeyByIP(64), empty),
		"Compose of empty parts":        Compose(empty, empty),
		"KeyByRoute's inner key":        KeyByRoute(func(*http.Request) string { return "GET /x" }, empty),
		"KeyByHeader's MissingFallback": KeyByHeader("X-Api-Key", MissingFallback(empty)),
	}
}

// An empty key from any key function is a key error: 400, counted
// Rejected, nothing stored; never one bucket shared by every client that
// gets it. Before, three clients whose KeyFunc returned "" shared one
// bucket of Limit 2 (200, 200, 429), so one client could exhaust
// everybody's limit; a Compose or KeyByRoute with an empty part shared one
// per route or per the other parts.
func TestEmptyKeyIsAKeyError(t *testing.T) {
	for name, k := range emptyKeys() {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, engine.Config{Limit: 2})
			m := mustMiddleware(t, e, WithKey(k))
			h := m.Handler(okHandler)
			for _, remote := range []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1"} {
				w := do(h, remote, nil)
				if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "the key is empty") {
					t.Errorf("client %s: %d %q, want 400 naming the empty key", remote, w.Code, w.Body.String())
				}
			}
			if s := m.Stats(); s != (Stats{Rejected: 3}) || e.Len() != 0 {
				t.Errorf("Stats %+v, engine keys %d; want Rejected 3 and nothing stored", s, e.Len())
			}
		})
	}
}

// A key function that returns "" only for some requests (here: those
// without X-Tenant) refuses those, and keys the others as usual, each
// tenant in its own bucket. Under WithDryRun the empty key is counted
// Rejected and the request served, still without a decision.
func TestEmptyKeyOnlySometimes(t *testing.T) {
	tenant := KeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil })
	e, _ := newEngine(t, engine.Config{Limit: 1})
	m := mustMiddleware(t, e, WithKey(tenant))
	h := m.Handler(okHandler)
	as := func(name string) func(*http.Request) {
		return func(r *http.Request) {
			if name != "" {
				r.Header.Set("X-Tenant", name)
			}
		}
	}
	for i, c := range []struct {
		tenant string
		want   int
	}{{"a", 200}, {"", 400}, {"b", 200}, {"", 400}, {"a", 429}, {"", 400}} {
		if w := do(h, "192.0.2.1:1", as(c.tenant)); w.Code != c.want {
			t.Errorf("request %d (tenant %q): %d, want %d", i, c.tenant, w.Code, c.want)
		}
	}
	if s := m.Stats(); s != (Stats{Allowed: 2, Denied: 1, Rejected: 3}) || e.Len() != 2 {
		t.Errorf("Stats %+v, engine keys %d; want the two tenants' keys only", s, e.Len())
	}

	dry := mustMiddleware(t, e, WithKey(tenant), WithDryRun())
	if w := do(dry.Handler(okHandler), "192.0.2.1:1", nil); w.Code != 200 {
		t.Errorf("dry run: %d, want 200", w.Code)
	}
	if s := dry.Stats(); s != (Stats{Rejected: 1}) || e.Len() != 2 {
		t.Errorf("dry run: Stats %+v, engine keys %d", s, e.Len())
	}
}

// Under NewMulti, an empty key of any policy refuses the request before
// any policy is charged.
func TestEmptyKeyOfOnePolicy(t *testing.T) {
	ip, _ := newEngine(t, engine.Config{})
	tenant, _ := newEngine(t, engine.Config{})
	m, err := NewMulti([]Policy{
		{Name: "ip", Limiter: ip},
		{Name: "tenant", Limiter: tenant, Key: emptyKeys()["KeyFunc"]},
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := do(m.Handler(okHandler), "192.0.2.1:1", nil); w.Code != http.StatusBadRequest {
		t.Fatalf("%d %q, want 400", w.Code, w.Body.String())
	}
	if s := m.Stats(); s != (Stats{Rejected: 1}) || ip.Len() != 0 || tenant.Len() != 0 {
		t.Errorf("Stats %+v, keys %d and %d; want nothing charged", s, ip.Len(), tenant.Len())
	}
}
