package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// prompt10 is a prompt of 10 tokens; the model answers it with 10 more.
var prompt10 = strings.TrimSpace(strings.Repeat("word ", 10))

func post(t *testing.T, h http.Handler, tenant, body string) (int, usage) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
	r.Header.Set("X-Tenant", tenant)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out struct{ Usage usage }
	if w.Code == http.StatusOK {
		if err := json.NewDecoder(w.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
	}
	return w.Code, out.Usage
}

// budgetRun checks the gateway on limiter, a budget of 1000 tokens per
// minute, within one minute: each request is estimated at 10 + 400 = 410
// tokens and uses 20. Without settling, 2 would fit (820); settled to
// their usage, a request fits while the tokens used so far leave room for
// its estimate: 20k + 410 ≤ 1000, so 30 requests (k = 0 … 29), and the
// 31st is refused though only 600 tokens were used. left reads the
// tenant's remaining tokens.
func budgetRun(t *testing.T, limiter any, left func(tenant string) int64) {
	g, err := newGateway(limiter)
	if err != nil {
		t.Fatal(err)
	}
	h := g.handler()
	body := `{"prompt": "` + prompt10 + `", "max_tokens": 400}`
	for k := range 30 {
		code, u := post(t, h, "acme", body)
		if code != http.StatusOK || u.TotalTokens != 20 {
			t.Fatalf("request %d: %d %+v", k, code, u)
		}
		if got := left("acme"); got != 1000-20*int64(k+1) {
			t.Fatalf("after request %d: %d tokens left, want %d", k, got, 1000-20*(k+1))
		}
	}
	if code, _ := post(t, h, "acme", body); code != http.StatusTooManyRequests {
		t.Fatalf("the 31st request: %d, want 429 (its estimate of 410 does not fit the 400 left)", code)
	}
	if got := left("acme"); got != 400 {
		t.Fatalf("after the refusal: %d tokens left, want 400 (a refusal reserves nothing)", got)
	}
	// A smaller estimate still fits.
	if code, u := post(t, h, "acme", `{"prompt": "`+prompt10+`", "max_tokens": 10}`); code != http.StatusOK || u.TotalTokens != 20 {
		t.Fatalf("a request estimated at 20: %d %+v", code, u)
	}
	// Another tenant has its own budget; a bad body is a 400, not counted.
	if code, _ := post(t, h, "bob", body); code != http.StatusOK || left("bob") != 980 {
		t.Fatalf("bob: %d, %d left", code, left("bob"))
	}
	if code, _ := post(t, h, "bob", `{"prompt": 7}`); code != http.StatusBadRequest || left("bob") != 980 {
		t.Fatalf("a bad body: %d, %d left", code, left("bob"))
	}
	if st := g.mw.Stats(); st.SettleErrors != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

// In process, at a fixed instant.
func TestGatewaySettlesToUsage(t *testing.T) {
	cfg := tpmConfig(1000)
	cfg.Clock = engine.NewManualClock(time.Unix(1_700_000_000, 0))
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	budgetRun(t, e, func(tenant string) int64 { return e.AllowN(tenant, 0).Remaining })
}

// Shared through a real redis-server: the same run, the same figures (the
// window is a minute, and nothing leaves it during the run).
func TestGatewaySettlesToUsageOverRedis(t *testing.T) {
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	l, err := redisstore.New(rdb, tpmConfig(1000))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	budgetRun(t, l, func(tenant string) int64 {
		d, err := l.AllowN(t.Context(), tenant, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	})
}
