package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// An LLM gateway with a tokens-per-minute limit per API key: the
// middleware reserves an estimate of each request's tokens (here the
// request's max_tokens, sent as a header) before the handler, and the
// handler reports the tokens the model used; the middleware settles to
// them. A third request finds the key's tokens spent by the second, whose
// reply ran past its estimate.
func ExampleWithSettle() {
	e, err := engine.New(engine.Config{
		Limit: 10_000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict,
		Clock: engine.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), // a fixed instant, for the output below
	})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	m, err := httplimit.NewMiddleware(e,
		httplimit.WithPolicyName("tokens", 0),
		httplimit.WithKey(httplimit.KeyByHeader("X-Api-Key", httplimit.MissingReject)),
		httplimit.WithCost(func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.Header.Get("X-Max-Tokens"), 10, 64)
			return n
		}),
		httplimit.WithSettle())
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used, _ := strconv.ParseInt(r.Header.Get("X-Model-Uses"), 10, 64) // the model's usage, from its response
		_ = httplimit.ReportCost(r.Context(), used)
		_, _ = io.WriteString(w, "completion")
	}))
	for _, c := range []struct{ max, uses string }{{"2000", "700"}, {"4000", "9000"}, {"2000", "10"}} {
		r := httptest.NewRequest("POST", "/v1/completions", nil)
		r.Header.Set("X-Api-Key", "key-1")
		r.Header.Set("X-Max-Tokens", c.max)
		r.Header.Set("X-Model-Uses", c.uses)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s, then %d left\n", w.Code, w.Header().Get("RateLimit"), e.AllowN("key-1", 0).Remaining)
	}
	// Output:
	// 200 "tokens";r=8000;t=66, then 9300 left
	// 200 "tokens";r=5300;t=66, then 300 left
	// 429 "tokens";r=300;t=66, then 300 left
}
