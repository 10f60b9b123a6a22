package adapter

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// configured is a limiter that reports only its Config.
type configured struct{ c engine.Config }

func (c configured) Config() engine.Config { return c.c }

func TestFieldsValues(t *testing.T) {
	for _, c := range []struct {
		name      string
		l         any
		window    time.Duration
		policy    string // Policy(7)
		admitted  int64  // AdmittedReset
		rateLimit string // RateLimit(3, 4)
	}{
		{"no config, whole seconds", nil, 10 * time.Second, `"p";q=7;w=10`, -1, `"p";r=3;t=4`},
		{"no config, 100 ms: no w=", nil, 100 * time.Millisecond, `"p";q=7`, -1, `"p";r=3;t=4`},
		{"no config, no window", nil, 0, `"p";q=7`, -1, `"p";r=3;t=4`},
		{"sliding 10 s / 10: W + w", configured{engine.Config{Limit: 7, Window: 10 * time.Second}}, 0, `"p";q=7;w=10`, 11, `"p";r=3;t=4`},
		{"sliding 1 s / 3: rounded up", configured{engine.Config{Limit: 7, Window: time.Second, SubWindows: 3}}, time.Second, `"p";q=7;w=1`, 2, `"p";r=3;t=4`},
		{"strict", configured{engine.Config{Limit: 7, Window: 2 * time.Second, SubWindows: 2, Algorithm: engine.SlidingWindowStrict}}, 0, `"p";q=7;w=2`, 3, `"p";r=3;t=4`},
		{"log", configured{engine.Config{Limit: 7, Window: 1500 * time.Millisecond, Algorithm: engine.SlidingLog}}, 0, `"p";q=7`, 2, `"p";r=3;t=4`},
		// A token bucket's w= is the time to refill from empty, Burst·W/L,
		// when whole seconds; t= of an admission with Remaining 0 is it.
		{"token 10/s, burst 20: w=2", configured{engine.Config{Limit: 10, Window: time.Second, Burst: 20, Algorithm: engine.TokenBucket}}, 0, `"p";q=7;w=2`, 2, `"p";r=3;t=4`},
		{"token 1 per 3 s, burst 2: w=6", configured{engine.Config{Limit: 1, Window: 3 * time.Second, Burst: 2, Algorithm: engine.TokenBucket}}, 0, `"p";q=7;w=6`, 6, `"p";r=3;t=4`},
		{"token 7 per 1 ms: no w=", configured{engine.Config{Limit: 7, Window: time.Millisecond, Burst: 7, Algorithm: engine.TokenBucket}}, 0, `"p";q=7`, 1, `"p";r=3;t=4`},
		{"token 3/s, burst 1: refill not whole ns, no w=", configured{engine.Config{Limit: 3, Window: time.Second, Burst: 1, Algorithm: engine.TokenBucket}}, 0, `"p";q=7`, 1, `"p";r=3;t=4`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := NewFields("httplimit: ", "New", c.l, "p", c.window)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Policy(7); got != c.policy {
				t.Errorf("Policy(7) = %q, want %q", got, c.policy)
			}
			if v := f.Value(7); v.XLimit != "7" || v != f.Value(7) {
				t.Errorf("Value(7) = %+v, not cached or XLimit wrong", v)
			}
			if v := f.Value(7 + policySlots); v.Policy == c.policy || f.Value(7).XLimit != "7" {
				t.Errorf("a colliding limit returned the other's value: %+v", v)
			}
			if got := f.AdmittedReset(0); got != c.admitted {
				t.Errorf("AdmittedReset() = %d, want %d", got, c.admitted)
			}
			if got := f.RateLimit(3, 4); got != c.rateLimit {
				t.Errorf("RateLimit(3, 4) = %q, want %q", got, c.rateLimit)
			}
		})
	}
}

func TestFieldsRateLimitMember(t *testing.T) {
	f, err := NewFields("httplimit: ", "New", nil, `a"b\c`, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remaining, reset int64
		want             string
	}{
		{5, 0, `"a\"b\\c";r=5;t=0`},
		{-2, 3, `"a\"b\\c";r=0;t=3`}, // a negative remaining is 0
		{5, -1, `"a\"b\\c";r=5`},     // no t=
	} {
		if got := f.RateLimit(c.remaining, c.reset); got != c.want {
			t.Errorf("RateLimit(%d, %d) = %q, want %q", c.remaining, c.reset, got, c.want)
		}
	}
	if got := f.Policy(1); got != `"a\"b\\c";q=1` {
		t.Errorf("Policy(1) = %q", got)
	}
	if got, err := PolicyName("p: ", `x"y`); err != nil || got != `x\"y` {
		t.Errorf("PolicyName = %q, %v", got, err)
	}
	if _, err := PolicyName("p: ", ""); err == nil {
		t.Error("PolicyName(\"\") accepted")
	}
}

// A FixedWindow policy's admitted t= is the end of the Unix-aligned window
// holding the decision's time, rounded up to whole seconds.
func TestFieldsFixedWindowResetIsTheWindowEnd(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0).Add(2500 * time.Millisecond))
	f, err := NewFields("httplimit: ", "New", configured{engine.Config{Limit: 5, Window: 10 * time.Second, Algorithm: engine.FixedWindow, Clock: clk}}, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	// 1_700_000_000 is a multiple of 10 s: the window ends at +10 s.
	if got := f.AdmittedReset(0); got != 8 { // 7.5 s, rounded up
		t.Errorf("AdmittedReset() = %d, want 8", got)
	}
	at := time.Unix(1_700_000_009, 0).UnixNano()
	if got := f.AdmittedResetAt(at, 0); got != 1 {
		t.Errorf("AdmittedResetAt(+9 s) = %d, want 1", got)
	}
	// Without a clock in the Config it reads the wall clock: a value
	// within the window.
	f, err = NewFields("httplimit: ", "New", configured{engine.Config{Limit: 5, Window: 10 * time.Second, Algorithm: engine.FixedWindow}}, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.AdmittedReset(0); got < 1 || got > 10 {
		t.Errorf("AdmittedReset() on the wall clock = %d, want 1 … 10", got)
	}
}

func TestNewFieldsErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		l      any
		policy string
		window time.Duration
		want   string
	}{
		{"bad name", nil, "", 0, "WithPolicyName name"},
		{"negative window", nil, "p", -1, "WithPolicyName window = -1ns"},
		{"limiter without a window", configured{engine.Config{Limit: 1}}, "p", 0, "httplimit: New: the limiter's Config().Window = 0s, want > 0"},
		{"window disagrees", configured{engine.Config{Limit: 1, Window: time.Second}}, "p", 2 * time.Second, "WithPolicyName window = 2s, but the limiter's Config().Window = 1s; pass 0 to take the limiter's"},
	} {
		if _, err := NewFields("httplimit: ", "New", c.l, c.policy, c.window); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A nil pointer of a Configured type is not read.
	if f, err := NewFields("httplimit: ", "New", (*engine.Engine)(nil), "p", time.Second); err != nil || f.AdmittedReset(0) != -1 {
		t.Errorf("nil engine: %v", err)
	}
}

func TestRetrySeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1}, {-time.Second, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{engine.Never, int64(engine.Never/time.Second) + 1},
	} {
		if got := RetrySeconds(c.d); got != c.want {
			t.Errorf("RetrySeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// A token bucket's admitted t= is the time until it is full again, at most
// (Burst − Remaining)·Window/Limit, rounded up to whole seconds.
func TestFieldsTokenBucketAdmittedReset(t *testing.T) {
	f, err := NewFields("httplimit: ", "New", configured{engine.Config{Limit: 10, Window: time.Second, Burst: 20, Algorithm: engine.TokenBucket}}, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ remaining, want int64 }{{20, 0}, {19, 1}, {10, 1}, {9, 2}, {0, 2}, {-1, 2}, {25, 0}} {
		if got := f.AdmittedReset(c.remaining); got != c.want {
			t.Errorf("AdmittedReset(%d) = %d, want %d", c.remaining, got, c.want)
		}
	}
}
