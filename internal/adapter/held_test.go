package adapter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// Multi.Reserve over engines keeps what every policy admitted, and on a
// refusal cancels what the policies before it reserved; a Config.KeyLimit
// that panics cancels them too, as the panic unwinds.
func TestMultiReserveAllOrNothing(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	panicky := func(key string) int64 {
		if key == "boom" {
			panic("KeyLimit")
		}
		return 0
	}
	a := newTestEngine(t, engine.Config{Limit: 5, Window: time.Second, Clock: clk, DisableEviction: true})
	b := newTestEngine(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk, DisableEviction: true, KeyLimit: panicky})
	m := NewMulti([]Backend{mustBackend(t, a), mustBackend(t, b)})
	left := func(e *engine.Engine, k string) int64 { return e.AllowN(k, 0).Remaining }
	ds, have, held := make([]engine.Decision, 2), make([]bool, 2), make([]Held, 2)
	v := m.Reserve(context.Background(), []string{"k", "k"}, []int64{2, 2}, false, ds, have, held)
	if v.At != -1 || held[0].Units() != 2 || held[1].Units() != 2 || ds[0].Remaining != 3 || ds[1].Remaining != 0 {
		t.Fatalf("admitted: %+v, held %d %d, ds %+v", v, held[0].Units(), held[1].Units(), ds)
	}
	// Refused by b: a's reservation is cancelled, and read again.
	ds, have, held = make([]engine.Decision, 2), make([]bool, 2), make([]Held, 2)
	v = m.Reserve(context.Background(), []string{"k", "k"}, []int64{1, 1}, true, ds, have, held)
	if v.At != 1 || held[0].Units() != 0 || !have[0] || ds[0].Remaining != 3 || left(a, "k") != 3 {
		t.Fatalf("refused: %+v, held %d, ds %+v, a left %d", v, held[0].Units(), ds, left(a, "k"))
	}
	// b's KeyLimit panics for the key "boom": a's reservation goes back.
	func() {
		defer func() {
			if recover() != "KeyLimit" {
				t.Fatal("the panic did not go on")
			}
		}()
		m.Reserve(context.Background(), []string{"x", "boom"}, []int64{4, 1}, false, make([]engine.Decision, 2), make([]bool, 2), make([]Held, 2))
	}()
	if got := left(a, "x"); got != 5 {
		t.Fatalf("after the panic: a holds %d of 5 for x", 5-got)
	}
	// Settling what was held: in flight gives it back, a settle charges
	// the difference, and the policies neither keep theirs.
	hs := []Held{}
	ba := mustBackend(t, a)
	for _, k := range []string{"p", "q", "r"} {
		d, h, err := ba.Reserve(context.Background(), k, 2)
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		hs = append(hs, h)
	}
	var c Reported
	c.n.Store(4)
	c.set.Store(true)
	if Finish(context.Background(), hs, 1, 2, false, &c, []int64{2, 2, 2}) {
		t.Fatal("a settle failed")
	}
	if got := [3]int64{left(a, "p"), left(a, "q"), left(a, "r")}; got != [3]int64{5, 1, 3} {
		t.Fatalf("after Finish: %v, want [5 1 3]", got)
	}
}

// Over shared limiters, a refusal gives back what the ReservingLimiters
// before it reserved; a plain ContextLimiter keeps what it admitted.
func TestMultiReserveReleasesRemotes(t *testing.T) {
	a := newTestEngine(t, engine.Config{Limit: 5, Window: time.Second})
	b := newTestEngine(t, engine.Config{Limit: 1, Window: time.Second})
	ra := &adaptertest.Reserving{E: a}
	plain := &remoteStub{d: engine.Decision{Allowed: true, Limit: 9, Remaining: 8}}
	rb := &adaptertest.Reserving{E: b}
	m := NewMulti([]Backend{mustBackend(t, ra), mustBackend(t, plain), mustBackend(t, rb)})
	b.AllowN("k", 1) // b is full
	ds, have, held := make([]engine.Decision, 3), make([]bool, 3), make([]Held, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the caller has gone by the release: it still happens
	v := m.Reserve(ctx, []string{"k", "k", "k"}, []int64{2, 1, 1}, false, ds, have, held)
	if v.At != 2 {
		t.Fatalf("%+v", v)
	}
	if got := a.AllowN("k", 0).Remaining; got != 5 || ra.Settles.Load() != 1 || ra.CtxDone.Load() != 0 {
		t.Fatalf("a: remaining %d, %d settles (%d on a done context)", got, ra.Settles.Load(), ra.CtxDone.Load())
	}
	if len(plain.got) != 1 {
		t.Fatalf("the plain limiter was asked %d times", len(plain.got))
	}
}

// cannotReserve has ReserveN but cannot use it (as redisstore's hybrid
// limiter): CanReserve says why.
type cannotReserve struct{}

func (cannotReserve) AllowN(context.Context, string, int64) (engine.Decision, error) {
	return engine.Decision{}, nil
}
func (cannotReserve) ReserveN(context.Context, string, int64) (engine.Decision, SettleFunc, error) {
	return engine.Decision{}, nil, errCannot
}
func (cannotReserve) CanReserve() error { return errCannot }

var errCannot = errors.New("cannot reserve in this mode")

// CheckHold refuses, at construction, a ReservingLimiter whose CanReserve
// reports that it cannot reserve, naming the option and wrapping the cause.
func TestCheckHoldAsksCanReserve(t *testing.T) {
	b, err := NewBackend(cannotReserve{})
	if err != nil || !b.CanReserve() {
		t.Fatal(err)
	}
	for _, opt := range []string{"WithInFlight", "WithSettle"} {
		if err := CheckHold(opt, cannotReserve{}, b); !errors.Is(err, errCannot) || !strings.HasPrefix(err.Error(), opt) {
			t.Fatalf("CheckHold(%s): %v", opt, err)
		}
	}
}

// localFallback admits through its failure policy (an error with an
// admission) and holds the units locally, as redisstore's FallbackLocal:
// its SettleFunc records what it was settled to.
type localFallback struct{ settled []int64 }

func (l *localFallback) AllowN(context.Context, string, int64) (engine.Decision, error) {
	return engine.Decision{Allowed: true, Limit: 5}, errCannot
}
func (l *localFallback) ReserveN(_ context.Context, _ string, n int64) (engine.Decision, SettleFunc, error) {
	return engine.Decision{Allowed: true, Limit: 5}, func(_ context.Context, actual int64) (engine.Decision, error) {
		l.settled = append(l.settled, actual)
		return engine.Decision{}, nil
	}, errCannot
}

// A failure policy's admission that holds units (FallbackLocal's) keeps
// them in its Held, alone and under Multi.Reserve, so that the adapters
// give them back after the handler; a later policy's refusal gives them
// back at once.
func TestReserveKeepsFailurePolicyHold(t *testing.T) {
	lf := &localFallback{}
	b := mustBackend(t, lf)
	d, h, err := b.Reserve(context.Background(), "k", 2)
	if !errors.Is(err, errCannot) || !d.Allowed || h.Units() != -1 {
		t.Fatalf("Reserve: %+v %v, held %d", d, err, h.Units())
	}
	if err := h.Settle(context.Background(), 0); err != nil || len(lf.settled) != 1 || lf.settled[0] != 0 {
		t.Fatalf("Settle: %v %v", err, lf.settled)
	}
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	e := newTestEngine(t, engine.Config{Limit: 1, Window: time.Second, Clock: clk, DisableEviction: true})
	m := NewMulti([]Backend{mustBackend(t, lf), mustBackend(t, e)})
	ds, have, held := make([]engine.Decision, 2), make([]bool, 2), make([]Held, 2)
	if v := m.Reserve(context.Background(), []string{"k", "k"}, []int64{1, 1}, false, ds, have, held); v.At != -1 || !v.Failed || held[0].Units() != -1 {
		t.Fatalf("admitted with a failure: %+v, held %d", v, held[0].Units())
	}
	lf.settled = nil
	ds, have, held = make([]engine.Decision, 2), make([]bool, 2), make([]Held, 2)
	if v := m.Reserve(context.Background(), []string{"k", "k"}, []int64{1, 1}, false, ds, have, held); v.At != 1 || len(lf.settled) != 1 || lf.settled[0] != 0 {
		t.Fatalf("refused by the engine: %+v, the failure policy's hold settled %v, want [0]", v, lf.settled)
	}
}
