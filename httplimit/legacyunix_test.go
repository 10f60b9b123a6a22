package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// HeadersLegacyUnix sends X-RateLimit-Reset as a Unix time (httprate's and
// GitHub's form): the wall clock's now plus the delta that HeadersLegacy
// sends, on admitted responses and on a 429.
func TestLegacyUnixResetIsNowPlusTheDelta(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_800_000_000, 0))
	e, err := engine.New(engine.Config{Limit: 1, Window: 10 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	delta, err := httplimit.NewMiddleware(e, httplimit.WithHeaders(httplimit.HeadersLegacy))
	if err != nil {
		t.Fatal(err)
	}
	unix, err := httplimit.NewMiddleware(e, httplimit.WithHeaders(httplimit.HeadersLegacyUnix))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	serve := func(m *httplimit.Middleware, ip string) (int, int64) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = ip + ":1234"
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, r)
		v, err := strconv.ParseInt(w.Header().Get("X-Ratelimit-Reset"), 10, 64)
		if err != nil {
			t.Fatalf("X-RateLimit-Reset %q: %v", w.Header().Get("X-Ratelimit-Reset"), err)
		}
		return w.Code, v
	}
	for _, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		code, d := serve(delta, "192.0.2.1")
		before := time.Now().Unix()
		code2, u := serve(unix, "192.0.2.2")
		after := time.Now().Unix()
		if code != want || code2 != want {
			t.Fatalf("codes %d and %d, want %d", code, code2, want)
		}
		if u < before+d || u > after+d {
			t.Errorf("%d: X-RateLimit-Reset %d, want the wall clock's now (%d…%d) plus the delta %d", want, u, before, after, d)
		}
	}
	_, err = httplimit.NewMiddleware(e, httplimit.WithHeaders(httplimit.HeadersLegacy|httplimit.HeadersLegacyUnix))
	if err == nil || !strings.Contains(err.Error(), "WithHeaders") {
		t.Errorf("both legacy styles: err %v, want one naming WithHeaders", err)
	}
}
