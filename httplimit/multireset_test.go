package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// A FixedWindow policy of NewMulti names in its admitted t= the end of the
// window its units were counted in, at the time every engine decided at
// (the first engine's clock), not at its own engine's clock: with the
// first clock at :02 and the second's at :08 of a 10 s window, policy b
// said t=2 where the next 429 in that window said t=8.
func TestMultiFixedWindowResetIsCountedFromTheDecisionTime(t *testing.T) {
	c1 := engine.NewManualClock(time.Unix(1_800_000_002, 0))
	c2 := engine.NewManualClock(time.Unix(1_800_000_008, 0))
	e1, err := engine.New(engine.Config{Limit: 5, Window: 10 * time.Second, Algorithm: engine.FixedWindow, Clock: c1})
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	e2, err := engine.New(engine.Config{Limit: 1, Window: 10 * time.Second, Algorithm: engine.FixedWindow, Clock: c2})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	m, err := httplimit.NewMulti([]httplimit.Policy{{Name: "a", Limiter: e1}, {Name: "b", Limiter: e2}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w
	}
	reset := func(member string) string { return member[strings.LastIndex(member, "t=")+2:] }
	ok, deny := serve(), serve()
	if ok.Code != http.StatusOK || deny.Code != http.StatusTooManyRequests {
		t.Fatalf("codes %d, %d; want 200, 429", ok.Code, deny.Code)
	}
	b1, b2 := ok.Header().Values("RateLimit")[1], deny.Header().Values("RateLimit")[1]
	if reset(b1) != "8" || reset(b2) != "8" {
		t.Errorf("policy b admitted with %q, the next 429 in that window says %q: both want t=8", b1, b2)
	}
}
