package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// sfMember is one member of a Structured Field List of rate-limit
// policies: a String name with Integer parameters.
type sfMember struct {
	name   string
	params map[string]int64
}

// parseSFList parses the field lines of a RateLimit or RateLimit-Policy
// field as RFC 9651 lists of `"name";k=v;…` members, independently of the
// middleware's writer: lines are joined by commas (RFC 9651 section 4.2),
// members split at commas outside strings.
func parseSFList(t *testing.T, lines []string) []sfMember {
	t.Helper()
	s := strings.Join(lines, ",")
	var out []sfMember
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t")
		if len(s) == 0 || s[0] != '"' {
			t.Fatalf("member does not start with a string: %q", s)
		}
		i := 1
		var name strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
			name.WriteByte(s[i])
		}
		if i == len(s) {
			t.Fatalf("unterminated string in %q", s)
		}
		s = s[i+1:]
		m := sfMember{name: name.String(), params: map[string]int64{}}
		for len(s) > 0 && s[0] == ';' {
			end := strings.IndexAny(s[1:], ";,")
			if end < 0 {
				end = len(s) - 1
			}
			k, v, ok := strings.Cut(s[1:1+end], "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil {
				t.Fatalf("parameter %q is not key=integer", s[1:1+end])
			}
			m.params[k] = n
			s = s[1+end:]
		}
		out = append(out, m)
		s = strings.TrimLeft(s, " \t")
		if len(s) > 0 {
			if s[0] != ',' {
				t.Fatalf("junk after member: %q", s)
			}
			s = s[1:]
		}
	}
	return out
}

// TestMultiChargesOnlyWhatItAdmits: a per-IP limit and a per-tenant one
// in one Middleware over engines. A request the tenant limit refuses
// leaves the per-IP limit uncharged (all or nothing), where nested
// middlewares charge the outer limit for it. Every response has one list
// member per decided policy, in order.
func TestMultiChargesOnlyWhatItAdmits(t *testing.T) {
	ipE, _ := newEngine(t, engine.Config{Limit: 5})
	tenantE, _ := newEngine(t, engine.Config{Limit: 1})
	tenant := KeyByHeader("X-Tenant", MissingReject)
	m, err := NewMulti([]Policy{
		{Name: "per-ip", Limiter: ipE},
		{Name: "tenant", Limiter: tenantE, Key: tenant},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	req := func(r *http.Request) { r.Header.Set("X-Tenant", "acme") }
	ipLeft := func() int64 { return ipE.AllowN("192.0.2.1", 0).Remaining }

	w := do(h, "192.0.2.1:1", req)
	if w.Code != http.StatusOK || ipLeft() != 4 {
		t.Fatalf("first: %d, per-ip remaining %d", w.Code, ipLeft())
	}
	checkMembers(t, w.Header(), []string{"per-ip", "tenant"}, []int64{5, 1}, []int64{4, 0})
	for i := range 3 {
		w = do(h, "192.0.2.1:1", req)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("refusal %d: %d", i, w.Code)
		}
		if got := ipLeft(); got != 4 {
			t.Fatalf("refusal %d charged the per-ip limit: remaining %d, want 4", i, got)
		}
		checkMembers(t, w.Header(), []string{"per-ip", "tenant"}, []int64{5, 1}, []int64{4, 0})
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, Denied: 3}) {
		t.Fatalf("Stats %+v", s)
	}

	// Nested middlewares, the same limits: the outer one is charged for
	// every request the inner one refuses.
	ipE2, _ := newEngine(t, engine.Config{Limit: 5})
	tenantE2, _ := newEngine(t, engine.Config{Limit: 1})
	nested := New(ipE2, WithPolicy("per-ip", 0))(New(tenantE2, WithPolicy("tenant", 0), WithKey(tenant))(okHandler))
	for range 4 {
		do(nested, "192.0.2.1:1", req)
	}
	if got := ipE2.AllowN("192.0.2.1", 0).Remaining; got != 1 {
		t.Fatalf("nested: per-ip remaining %d, want 1 (charged for 3 refusals)", got)
	}
}

// checkMembers parses RateLimit-Policy and RateLimit and checks one member
// per policy, in order, with q and r.
func checkMembers(t *testing.T, h http.Header, names []string, q, r []int64) {
	t.Helper()
	pol, rl := parseSFList(t, h.Values("RateLimit-Policy")), parseSFList(t, h.Values("RateLimit"))
	if len(pol) != len(names) || len(rl) != len(names) {
		t.Fatalf("RateLimit-Policy %q, RateLimit %q: want %d members each", h.Values("RateLimit-Policy"), h.Values("RateLimit"), len(names))
	}
	for i, n := range names {
		if pol[i].name != n || rl[i].name != n || pol[i].params["q"] != q[i] || rl[i].params["r"] != r[i] {
			t.Errorf("member %d: policy %+v, rate %+v; want %q q=%d r=%d", i, pol[i], rl[i], n, q[i], r[i])
		}
		if _, ok := rl[i].params["t"]; !ok {
			t.Errorf("member %d: no t= in %+v", i, rl[i])
		}
	}
}

// TestMultiInOrderOverSharedLimiters: with a limiter that is not an engine
// among the policies, they are asked in order and the first refusal
// decides; an earlier policy keeps its charge (it cannot be taken back),
// and a later one is not asked.
func TestMultiInOrderOverSharedLimiters(t *testing.T) {
	first, _ := newEngine(t, engine.Config{Limit: 5})
	var asked []string
	refuse := ContextLimiterFunc(func(_ context.Context, key string, n int64) (engine.Decision, error) {
		asked = append(asked, "refuse")
		return engine.Decision{Limit: 1, RetryAfter: 1e9}, nil
	})
	never := ContextLimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		asked = append(asked, "never")
		return engine.Decision{Allowed: true, Limit: 1}, nil
	})
	m, err := NewMulti([]Policy{{Name: "a", Limiter: first}, {Name: "b", Limiter: refuse}, {Name: "c", Limiter: never}})
	if err != nil {
		t.Fatal(err)
	}
	w := do(m.Handler(okHandler), "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("%d", w.Code)
	}
	if got := first.AllowN("192.0.2.1", 0).Remaining; got != 4 {
		t.Fatalf("the first policy's remaining %d, want 4 (charged, as documented)", got)
	}
	if strings.Join(asked, ",") != "refuse" {
		t.Fatalf("asked %v, want the refusing policy only", asked)
	}
	checkMembers(t, w.Header(), []string{"a", "b"}, []int64{5, 1}, []int64{4, 0})
}

// TestNewMultiErrors: every mistake is an error naming the policy.
func TestNewMultiErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		name string
		ps   []Policy
		opts []Option
		want string
	}{
		{"none", nil, nil, "NewMulti: 0 policies, want 1 … 8"},
		{"WithKey", []Policy{{Name: "a", Limiter: e}}, []Option{WithKey(KeyByIP(64))}, "WithKey and WithPolicy are given per policy"},
		{"twice", []Policy{{Name: "a", Limiter: e}, {Name: "a", Limiter: e}}, nil, `NewMulti policy 1 ("a"): the name is given twice`},
		{"bad name", []Policy{{Name: "", Limiter: e}}, nil, `NewMulti policy 0 (""): WithPolicy name`},
		{"not a limiter", []Policy{{Name: "a", Limiter: "x"}}, nil, `NewMulti policy 0 ("a"): string is not a limiter`},
		{"bad key", []Policy{{Name: "a", Limiter: e, Key: KeyByIP(200)}}, nil, "KeyByIP ipv6Prefix = 200"},
	} {
		if _, err := NewMulti(c.ps, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
