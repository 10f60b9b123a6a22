package adapter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestClassifyMapsEveryReason(t *testing.T) {
	e := newTestEngine(t, engine.Config{Limit: 2, Window: time.Second, MaxKeys: 1, DisableEviction: true})
	now := time.Unix(1_700_000_000, 0)
	admitted := e.AllowAt("a", 2, now)
	limited := e.AllowAt("a", 1, now)
	full := e.AllowAt("b", 1, now)
	costly := e.AllowAt("a", 3, now)
	long := e.AllowAt(strings.Repeat("x", engine.DefaultMaxKeyBytes+1), 1, now)
	for _, c := range []struct {
		name string
		d    engine.Decision
		n    int64
		want Outcome
	}{
		{"admitted", admitted, 2, Admitted},
		{"limited", limited, 1, Limited},
		{"keys full", full, 1, KeysFull},
		{"above the limit", costly, 3, TooCostly},
		{"key too long", long, 1, KeyRefused},
		{"a bad cost", engine.Decision{Limit: 2, RetryAfter: engine.Never}, -1, Misconfigured},
		{"a limit the engine rejected", engine.Decision{Limit: 5, RetryAfter: engine.Never}, 1, Misconfigured},
	} {
		if got := Classify(c.d, c.n); got != c.want {
			t.Errorf("%s: Classify(%+v, %d) = %v, want %v", c.name, c.d, c.n, got, c.want)
		}
	}
	for o, want := range map[Outcome]bool{Admitted: false, Limited: true, KeysFull: true, TooCostly: true, KeyRefused: false, Misconfigured: false} {
		if o.Refusal() != want {
			t.Errorf("%v.Refusal() = %v, want %v", o, o.Refusal(), want)
		}
	}
}

func TestKeyTooLongNamesTheSizeAndTheCap(t *testing.T) {
	if got, want := KeyTooLong("grpclimit: ", 300), "grpclimit: the key is 300 bytes, above the cap of 256 bytes (MaxKeyBytes); refused, never truncated"; got != want {
		t.Errorf("KeyTooLong = %q, want %q", got, want)
	}
}

func TestJoinKeys(t *testing.T) {
	parts := []string{"tenant", "", "user"}
	k, err := JoinKeys(len(parts), func(i int) (string, error) { return parts[i], nil })
	if err != nil || k != "tenant"+Sep+Sep+"user" {
		t.Errorf("JoinKeys = %q, %v", k, err)
	}
	bad := errors.New("no header")
	if k, err := JoinKeys(3, func(i int) (string, error) {
		if i == 1 {
			return "", bad
		}
		return "x", nil
	}); err != bad || k != "" {
		t.Errorf("JoinKeys with a failing part = %q, %v; want \"\", the part's error", k, err)
	}
}

func TestCheckShareAndQuiet(t *testing.T) {
	for _, s := range []float64{0.01, 0.5, 1} {
		if err := CheckShare("httplimit: ", s); err != nil {
			t.Errorf("CheckShare(%v): %v", s, err)
		}
	}
	for _, s := range []float64{0, -0.5, 1.01} {
		if err := CheckShare("httplimit: ", s); err == nil || !strings.Contains(err.Error(), "want 0 < share ≤ 1") {
			t.Errorf("CheckShare(%v) = %v", s, err)
		}
	}
	d := engine.Decision{Allowed: true, Limit: 10, Remaining: 5}
	for _, c := range []struct {
		below float64
		d     engine.Decision
		want  bool
	}{
		{0, d, false},   // the default: always send
		{0.5, d, true},  // 5 ≥ 0.5·10
		{0.6, d, false}, // 5 < 6
		{0.5, engine.Decision{Allowed: true, Limit: 10, Remaining: -1}, false},
	} {
		if got := Quiet(c.below, c.d); got != c.want {
			t.Errorf("Quiet(%v, %+v) = %v, want %v", c.below, c.d, got, c.want)
		}
	}
}

func TestCheckPolicy(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
		want   string // "" for valid
	}{
		{"default", 0, ""},
		{"default", time.Second, ""},
		{"", 0, `WithPolicyName name = "", want 1 … 64 printable ASCII characters`},
		{strings.Repeat("n", MaxPolicyName+1), 0, "want 1 … 64 printable ASCII characters"},
		{"tab\there", 0, "has byte 0x9 at 3, want printable ASCII (0x20 … 0x7e)"},
		{"caf\xc3\xa9", 0, "has byte 0xc3 at 3"},
		{"default", -time.Second, "WithPolicyName window = -1s, want 0 (the limiter's) or > 0"},
	} {
		err := CheckPolicy("httplimit: ", c.name, c.window)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckPolicy(%q, %v): %v", c.name, c.window, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "httplimit: ")):
			t.Errorf("CheckPolicy(%q, %v) = %v, want %q", c.name, c.window, err, c.want)
		}
	}
}

func TestAppendMetricsInClientGolangsFormat(t *testing.T) {
	m := Counts{Allowed: 1234567, Denied: 2, Rejected: 3, Errors: 4, Canceled: 5, WouldDeny: 6}
	e := engine.Stats{Keys: 7, Evicted: 8, Refused: 9}
	got := string(AppendMetrics([]byte("x\n"), &m, &e))
	want := `x
# HELP ringlimit_keys Keys held by the engine.
# TYPE ringlimit_keys gauge
ringlimit_keys 7
# HELP ringlimit_keys_evicted_total Keys reclaimed after being idle.
# TYPE ringlimit_keys_evicted_total counter
ringlimit_keys_evicted_total 8
# HELP ringlimit_keys_refused_total New keys refused because MaxKeys keys were held.
# TYPE ringlimit_keys_refused_total counter
ringlimit_keys_refused_total 9
# HELP ringlimit_requests_total Requests seen by the rate-limit middleware, by outcome.
# TYPE ringlimit_requests_total counter
ringlimit_requests_total{outcome="allowed"} 1.234567e+06
ringlimit_requests_total{outcome="canceled"} 5
ringlimit_requests_total{outcome="denied"} 2
ringlimit_requests_total{outcome="error"} 4
ringlimit_requests_total{outcome="rejected"} 3
ringlimit_requests_total{outcome="would_deny"} 6
`
	if got != want {
		t.Errorf("AppendMetrics:\n%s\nwant:\n%s", got, want)
	}
	if got := AppendMetrics(nil, nil, nil); len(got) != 0 {
		t.Errorf("AppendMetrics(nil, nil) = %q, want nothing", got)
	}
}
