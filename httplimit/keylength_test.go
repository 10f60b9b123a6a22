package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// TestLongHeaderValuesNeverReachTheLimiter is the memory denial of service
// of distinct huge KeyByHeader values: each was a new key the engine kept
// for W + 2w (200 of 1 MiB grew the heap by 200 MiB). Now each is refused
// with 400 naming the cap, and the limiter never sees it.
func TestLongHeaderValuesNeverReachTheLimiter(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	rec := &adaptertest.Recorder{E: e}
	m := mustMiddleware(t, rec, WithKey(KeyByHeader("X-Api-Key", MissingReject)))
	h := m.Handler(okHandler)
	big := strings.Repeat("k", 64<<10)
	for i := range 200 {
		w := do(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Api-Key", strconv.Itoa(i)+big) })
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "longer than 256 bytes (MaxKeyBytes)") {
			t.Fatalf("request %d: %d %q", i, w.Code, w.Body.String())
		}
	}
	if len(rec.Keys()) != 0 || e.Len() != 0 {
		t.Fatalf("the limiter saw %d keys and holds %d; want none", len(rec.Keys()), e.Len())
	}
	if s := m.Stats(); s != (Stats{Rejected: 200}) {
		t.Fatalf("Stats %+v", s)
	}
	// The cap is inclusive: a value of exactly MaxKeyBytes is a key.
	if w := do(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Api-Key", big[:MaxKeyBytes]) }); w.Code != http.StatusOK {
		t.Fatalf("a %d-byte value: %d", MaxKeyBytes, w.Code)
	}
}

// TestEveryKeyIsCapped: the cap holds for the key a Middleware is about to
// pass to the limiter, whatever Key built it: a KeyFunc's result, or a
// Compose of parts each under the cap.
func TestEveryKeyIsCapped(t *testing.T) {
	part := func(n int) Key {
		return KeyFunc(func(*http.Request) (string, error) { return strings.Repeat("p", n), nil })
	}
	for _, tc := range []struct {
		name string
		key  Key
		want int
	}{
		{"KeyFunc at the cap", part(MaxKeyBytes), http.StatusOK},
		{"KeyFunc above the cap", part(MaxKeyBytes + 1), http.StatusBadRequest},
		{"Compose above the cap", Compose(part(200), part(200)), http.StatusBadRequest},
		{"KeyByRoute above the cap", KeyByRoute(func(*http.Request) string { return strings.Repeat("r", 250) }, KeyByIP(64)), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEngine(t, engine.Config{})
			rec := &adaptertest.Recorder{E: e}
			w := do(mustMiddleware(t, rec, WithKey(tc.key)).Handler(okHandler), "192.0.2.1:1", nil)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d (%q)", w.Code, tc.want, w.Body.String())
			}
			if tc.want == http.StatusBadRequest {
				if !strings.Contains(w.Body.String(), "above the cap of 256 bytes (MaxKeyBytes)") || len(rec.Keys()) != 0 {
					t.Fatalf("body %q, the limiter saw %d keys", w.Body.String(), len(rec.Keys()))
				}
			}
		})
	}
}

// TestEngineKeyCapIsBadRequest: a key under MaxKeyBytes that the engine
// refuses for its own, lower, Config.MaxKeyBytes (engine.ReasonKeyTooLong)
// is a key error, 400, not a 500.
func TestEngineKeyCapIsBadRequest(t *testing.T) {
	e, _ := newEngine(t, engine.Config{MaxKeyBytes: 8})
	m := mustMiddleware(t, e, WithKey(KeyByHeader("X-Api-Key", MissingReject)))
	w := do(m.Handler(okHandler), "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Api-Key", "0123456789") })
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "Config.MaxKeyBytes") {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
	if s := m.Stats(); s != (Stats{Rejected: 1}) || e.Len() != 0 {
		t.Fatalf("Stats %+v, engine keys %d", s, e.Len())
	}
}
