package httplimit

// What a request holds under NewMulti with held policies (WithInFlight,
// WithSettle) when a policy refuses, panics or fails: nothing of the
// others, and every unit given back.

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// countingReserver is a ReservingLimiter over an engine that counts the settles
// of each reservation: the middleware "calls it at most once".
type countingReserver struct {
	e       *engine.Engine
	mu      sync.Mutex
	settles []int // per reservation
	actual  []int64
	refuse  bool
}

func (l *countingReserver) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.e.AllowN(key, n), nil
}

func (l *countingReserver) ReserveN(_ context.Context, key string, n int64) (engine.Decision, SettleFunc, error) {
	if l.refuse {
		return engine.Decision{Limit: 5, Remaining: 0, RetryAfter: time.Second}, nil, nil
	}
	r := l.e.Reserve(key, n)
	if !r.Decision().Allowed {
		return r.Decision(), nil, nil
	}
	l.mu.Lock()
	i := len(l.settles)
	l.settles = append(l.settles, 0)
	l.actual = append(l.actual, -1)
	l.mu.Unlock()
	return r.Decision(), func(ctx context.Context, actual int64) (engine.Decision, error) {
		l.mu.Lock()
		l.settles[i]++
		l.actual[i] = actual
		l.mu.Unlock()
		if actual == 0 {
			r.Cancel()
			return r.Decision(), nil
		}
		return r.Settle(actual)
	}, nil
}

// NewMulti: "A request that one policy refuses holds nothing of the others
// (all or nothing, as above; a shared limiter that can hold units, a
// ReservingLimiter, gives back what it admitted)". Mixed engines and shared
// limiters, in flight and settled, in both orders.
func TestMultiRefusalHoldsNothing(t *testing.T) {
	for _, c := range []struct {
		name              string
		sharedFirst       bool
		inFlight, settled bool
	}{
		{"shared in flight, then engine refuses", true, true, false},
		{"shared settled, then engine refuses", true, false, true},
		{"engine in flight, then shared refuses", false, true, false},
		{"engine settled, then shared refuses", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			se := limitEngine(t, 5, engine.SlidingWindowStrict)
			shared := &countingReserver{e: se}
			local := limitEngine(t, 5, engine.SlidingWindowStrict)
			sp := Policy{Name: "shared", Limiter: shared, InFlight: c.inFlight, Settle: c.settled}
			lp := Policy{Name: "local", Limiter: local, InFlight: c.inFlight, Settle: c.settled}
			var ps []Policy
			if c.sharedFirst {
				local.AllowN("192.0.2.1", 5) // the engine refuses
				ps = []Policy{sp, lp}
			} else {
				shared.refuse = true
				ps = []Policy{lp, sp}
			}
			m, err := NewMulti(ps)
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			w, _ := doCatch(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })), "192.0.2.1:1", nil)
			if w.Code != http.StatusTooManyRequests || ran {
				t.Fatalf("status %d, ran %v", w.Code, ran)
			}
			if c.sharedFirst {
				if got := remainingOf(se, "192.0.2.1"); got != 5 {
					t.Fatalf("the shared limiter holds %d units after the refusal", 5-got)
				}
				shared.mu.Lock()
				defer shared.mu.Unlock()
				for i, n := range shared.settles {
					if n != 1 || shared.actual[i] != 0 {
						t.Fatalf("reservation %d settled %d times, last to %d; want once, to 0", i, n, shared.actual[i])
					}
				}
			} else if got := remainingOf(local, "192.0.2.1"); got != 5 {
				t.Fatalf("the engine holds %d units after the refusal", 5-got)
			}
		})
	}
}

// A later policy's limiter panics (an engine Config.KeyLimit that panics):
// engine.AllowAll, which NewMulti's all-or-nothing is built on, promises
// "If a request panics (a Config.KeyLimit that panics), the requests
// reserved before it are cancelled as the panic unwinds: the panic goes
// on, and nothing is consumed". The units an earlier policy holds for the
// request (in flight, settled, or a plain rate) must not outlive the panic.
func TestMultiPanicInALaterPolicyGivesBack(t *testing.T) {
	for _, c := range []struct {
		name              string
		inFlight, settled bool
	}{{"rate", false, false}, {"in flight", true, false}, {"settled", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			first := limitEngine(t, 5, engine.SlidingWindowStrict)
			boom, err := engine.New(engine.Config{Limit: 5, Window: 10 * time.Second, Algorithm: engine.SlidingWindowStrict,
				KeyLimit: func(string) int64 { panic("KeyLimit") }})
			if err != nil {
				t.Fatal(err)
			}
			defer boom.Close()
			m, err := NewMulti([]Policy{
				{Name: "first", Limiter: first, InFlight: c.inFlight, Settle: c.settled},
				{Name: "boom", Limiter: boom},
			})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			_, p := doCatch(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })), "192.0.2.1:1", nil)
			if p == nil || ran {
				t.Fatalf("panic %v, handler ran %v", p, ran)
			}
			if got := remainingOf(first, "192.0.2.1"); got != 5 {
				t.Fatalf("the first policy keeps %d units after the panic", 5-got)
			}
		})
	}
}

type panickingReserver struct{ countingReserver }

func (l *panickingReserver) ReserveN(context.Context, string, int64) (engine.Decision, SettleFunc, error) {
	panic("backend bug")
}

// A shared limiter (a ReservingLimiter) that panics in ReserveN after an
// engine policy reserved its unit in flight, on NewMulti's ordered path:
// the engine's unit goes back, and the panic goes on. (It leaked until
// the lease ended: a tenant limited to 5 in flight ran 4 after one such
// panic, 0 after five.)
func TestMultiPanicInASharedPolicyGivesBack(t *testing.T) {
	first := limitEngine(t, 5, engine.SlidingWindowStrict)
	bad := &panickingReserver{countingReserver{e: limitEngine(t, 5, engine.SlidingWindowStrict)}}
	m, err := NewMulti([]Policy{
		{Name: "first", Limiter: first, InFlight: true},
		{Name: "bad", Limiter: bad, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, p := doCatch(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", nil)
	if p == nil {
		t.Fatal("no panic")
	}
	if got := remainingOf(first, "192.0.2.1"); got != 5 {
		t.Fatalf("the engine policy keeps %d units in flight after the panic", 5-got)
	}
}

// A later policy's Key or Cost function panics (a bug in the server's own
// code) after an earlier policy could have reserved: the earlier policy's
// in-flight unit must not stay held, on the all-engine path and on the
// ordered one (a shared limiter first).
func TestMultiKeyOrCostPanicGivesBack(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		for _, what := range []string{"key", "cost"} {
			first := limitEngine(t, 5, engine.SlidingWindowStrict)
			var firstLimiter any = first
			var shared *countingReserver
			if ordered {
				shared = &countingReserver{e: first}
				firstLimiter = shared
			}
			second := Policy{Name: "second", Limiter: limitEngine(t, 5, engine.SlidingWindowStrict)}
			if what == "key" {
				second.Key = KeyFunc(func(*http.Request) (string, error) { panic("key") })
			} else {
				second.Cost = func(*http.Request) int64 { panic("cost") }
			}
			m, err := NewMulti([]Policy{{Name: "first", Limiter: firstLimiter, InFlight: true}, second})
			if err != nil {
				t.Fatal(err)
			}
			_, p := doCatch(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", nil)
			if p == nil {
				t.Fatalf("ordered %v, %s: no panic", ordered, what)
			}
			if got := remainingOf(first, "192.0.2.1"); got != 5 {
				t.Errorf("ordered %v, a %s function's panic: the first policy keeps %d units in flight", ordered, what, 5-got)
			}
		}
	}
}

// panickingSettler is a ReservingLimiter whose SettleFunc panics.
type panickingSettler struct{ countingReserver }

func (l *panickingSettler) ReserveN(ctx context.Context, key string, n int64) (engine.Decision, SettleFunc, error) {
	d, _, err := l.countingReserver.ReserveN(ctx, key, n)
	return d, func(context.Context, int64) (engine.Decision, error) { panic("settle bug") }, err
}

// A shared limiter's SettleFunc that panics after the handler does not
// stop the give-backs of the other policies, before or after it: an
// engine policy in flight gets its unit back, and the panic goes on. (The
// policies after the panicking one kept their units for the whole lease.)
func TestMultiSettleFuncPanicGivesBackTheOthers(t *testing.T) {
	for _, sharedFirst := range []bool{true, false} {
		eng := limitEngine(t, 5, engine.SlidingWindowStrict)
		bad := &panickingSettler{countingReserver{e: limitEngine(t, 5, engine.SlidingWindowStrict)}}
		ps := []Policy{{Name: "shared", Limiter: bad, InFlight: true}, {Name: "engine", Limiter: eng, InFlight: true}}
		if !sharedFirst {
			ps[0], ps[1] = ps[1], ps[0]
		}
		m, err := NewMulti(ps)
		if err != nil {
			t.Fatal(err)
		}
		_, p := doCatch(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", nil)
		t.Logf("shared first %v: panic %v", sharedFirst, p)
		if got := remainingOf(eng, "192.0.2.1"); got != 5 {
			t.Errorf("shared first %v: the engine policy keeps %d units in flight after the shared settle panicked", sharedFirst, 5-got)
		}
	}
}
