package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Cancels, settles and charges that cannot reach Redis (the server was
// killed) are never silently dropped: each returns an error wrapping
// ErrNotApplied, is passed to the OnError hook once, and is counted in
// Stats (CancelErrors for units not given back, ChargeErrors for units
// not counted). The failed call keeps its claim: it is not sent again.
func TestHeldFailuresReported(t *testing.T) {
	s := redistest.Start(t)
	var hook hookLog
	l := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	r1, err1 := l.Reserve(ctx, "k", 2)
	r2, err2 := l.Reserve(ctx, "k", 2)
	r3, err3 := l.Reserve(ctx, "k", 2)
	if err := errors.Join(err1, err2, err3); err != nil || r3.Units() != 2 {
		t.Fatal(err, r3)
	}
	s.Kill()
	if ok, err := r1.Cancel(ctx); ok || !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Cancel with Redis down: %v %v, want false and ErrNotApplied", ok, err)
	}
	if _, err := r2.Settle(ctx, 5); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Settle to more with Redis down: %v, want ErrNotApplied", err)
	}
	if _, err := r3.Settle(ctx, 1); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Settle to fewer with Redis down: %v, want ErrNotApplied", err)
	}
	if _, err := l.ChargeN(ctx, "k", 3); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("ChargeN with Redis down: %v, want ErrNotApplied", err)
	}
	st := l.Stats()
	if st.CancelErrors != 2 || st.ChargeErrors != 2 || st.Failures < 1 {
		t.Fatalf("Stats: %+v, want CancelErrors 2, ChargeErrors 2, Failures ≥ 1", st)
	}
	if got := hook.count(ErrNotApplied); got != 4 {
		t.Fatalf("OnError got %d ErrNotApplied, want 4: %v", got, hook.all())
	}
	if ok, err := r1.Cancel(ctx); ok || err != nil {
		t.Fatalf("a second Cancel after the failed one: %v %v, want false, nil (never sent again)", ok, err)
	}
}

// A Cancel or Settle whose caller's context is done before it is sent
// sends nothing, counts nothing, and leaves the units held for a later
// call.
func TestHeldCallerGoneKeepsUnits(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	r, err := l.Reserve(ctx, "k", 3)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Cancel(canceled()); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Cancel on a done context: %v %v", ok, err)
	}
	if _, err := r.Settle(canceled(), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Settle on a done context: %v", err)
	}
	if st := l.Stats(); st.CancelErrors != 0 || st.Failures != 0 {
		t.Fatalf("Stats: %+v", st)
	}
	if ok, err := r.Cancel(ctx); !ok || err != nil {
		t.Fatalf("Cancel after: %v %v, want true", ok, err)
	}
	if got := storedUnits(t, c, l, "k"); got != 0 {
		t.Fatalf("stored %d, want 0", got)
	}
}

// With FallbackLocal, a reservation admitted while Redis fails is held in
// the local engine, and cancelled or settled there; a charge Redis did not
// record is charged locally, so that the local decisions count it.
func TestHeldFallbackLocal(t *testing.T) {
	l := mustNew(t, deadClient(t), engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithFallbackLocal(1))
	r, err := l.Reserve(ctx, "k", 4)
	if !errors.Is(err, ErrUnavailable) || !r.Decision().Allowed || r.Units() != 4 {
		t.Fatalf("Reserve with Redis down: %+v %v, want a local admission of 4 units", r, err)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 6 {
		t.Fatalf("local engine: %+v, want 4 units held", d)
	}
	if ok, err := r.Cancel(ctx); !ok || err != nil {
		t.Fatalf("Cancel of a local reservation: %v %v", ok, err)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 10 {
		t.Fatalf("local engine after Cancel: %+v, want nothing held", d)
	}
	d, settle, err := l.ReserveN(ctx, "k", 2)
	if !errors.Is(err, ErrUnavailable) || !d.Allowed || settle == nil {
		t.Fatalf("ReserveN with Redis down: %+v %v (settle nil: %v)", d, err, settle == nil)
	}
	if _, err := settle(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 3 {
		t.Fatalf("local engine after Settle(7) of 2: %+v, want 7 units", d)
	}
	if _, err := l.ChargeN(ctx, "k", 3); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("ChargeN with Redis down: %v", err)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 0 {
		t.Fatalf("local engine after ChargeN(3): %+v, want 10 units", d)
	}
}

// A hybrid limiter refuses reservations and charges with ErrHybridReserve,
// and the middleware options that need them fail at construction.
func TestHybridRefusesReserve(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute}, WithHybrid(10*time.Millisecond, 2), withManual())
	if err := l.CanReserve(); !errors.Is(err, ErrHybridReserve) {
		t.Fatalf("CanReserve: %v", err)
	}
	if r, err := l.Reserve(ctx, "k", 1); !errors.Is(err, ErrHybridReserve) || r.Decision().Allowed {
		t.Fatalf("Reserve: %+v %v", r, err)
	}
	if d, settle, err := l.ReserveN(ctx, "k", 1); !errors.Is(err, ErrHybridReserve) || d.Allowed || settle != nil {
		t.Fatalf("ReserveN: %+v %v", d, err)
	}
	if _, err := l.ChargeN(ctx, "k", 1); !errors.Is(err, ErrHybridReserve) {
		t.Fatalf("ChargeN: %v", err)
	}
	for _, opt := range []httplimit.Option{httplimit.WithInFlight(), httplimit.WithSettle()} {
		_, err := httplimit.NewMiddleware(l, opt)
		if err == nil || !errors.Is(err, ErrHybridReserve) || !strings.Contains(err.Error(), "With") {
			t.Fatalf("httplimit over a hybrid limiter: %v, want a construction error naming the option and ErrHybridReserve", err)
		}
	}
	plain := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := httplimit.NewMiddleware(plain, httplimit.WithInFlight()); err != nil {
		t.Fatalf("httplimit.WithInFlight over a plain limiter: %v", err)
	}
}

// A TokenBucket limiter refuses reservations and charges with
// ErrBucketReserve (the reservation script adjusts a window's sub-window),
// decides nothing and stores nothing; the middleware options that need
// them fail at construction. Before the refusal, the script ran on the
// bucket's key, got WRONGTYPE, and FailOpen admitted.
func TestTokenBucketRefusesReserve(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Burst: 1, Window: time.Hour}, WithFailurePolicy(FailOpen))
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("AllowN: %+v %v", d, err) // the bucket is empty after it
	}
	if err := l.CanReserve(); !errors.Is(err, ErrBucketReserve) {
		t.Fatalf("CanReserve: %v", err)
	}
	for range 3 {
		if r, err := l.Reserve(ctx, "k", 1); !errors.Is(err, ErrBucketReserve) || r.Decision().Allowed {
			t.Fatalf("Reserve on an empty bucket: %+v %v, want a refusal with ErrBucketReserve", r.Decision(), err)
		}
		if d, settle, err := l.ReserveN(ctx, "k", 1); !errors.Is(err, ErrBucketReserve) || d.Allowed || settle != nil {
			t.Fatalf("ReserveN: %+v %v", d, err)
		}
		if _, err := l.ChargeN(ctx, "k", 1); !errors.Is(err, ErrBucketReserve) {
			t.Fatalf("ChargeN: %v", err)
		}
	}
	if st := l.Stats(); st.Failures != 0 || st.FallbackDecisions != 0 {
		t.Fatalf("Stats %+v: a refusal is no failure", st)
	}
	for _, opt := range []httplimit.Option{httplimit.WithInFlight(), httplimit.WithSettle()} {
		if _, err := httplimit.NewMiddleware(l, opt); !errors.Is(err, ErrBucketReserve) {
			t.Fatalf("httplimit over a TokenBucket limiter: %v, want a construction error wrapping ErrBucketReserve", err)
		}
	}
}
