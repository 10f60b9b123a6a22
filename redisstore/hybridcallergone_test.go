package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A caller whose context has ended is never admitted (package doc, AllowN):
// that holds for a hybrid limiter's local decisions too, which make no round
// trip. The key is warmed so that the next decisions are local; a call with
// a context already cancelled must come back not Allowed, wrapping the
// context's error, counted CallerGone.
func TestHybridLocalDecisionCallerGone(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute}, WithHybrid(time.Minute, 10), WithReplicas(1))
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("warm-up: %+v %v", d, err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed || l.Stats().LocalDecisions != 1 {
		t.Fatalf("second decision not local: %+v %v %+v", d, err, l.Stats())
	}
	before := l.Stats()
	d, err := l.AllowN(canceled(), "k", 1)
	if d.Allowed {
		t.Errorf("a caller whose context had ended was admitted: %+v %v", d, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want one wrapping context.Canceled", err)
	}
	if after := l.Stats(); after.CallerGone != before.CallerGone+1 {
		t.Errorf("CallerGone %d → %d, want +1 (stats %+v)", before.CallerGone, after.CallerGone, after)
	}
}

// "A deadline that has passed counts as the context's end even before the
// context's timer fires" (README): also for a hybrid local decision.
func TestHybridLocalDecisionPassedDeadline(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 1000, Window: time.Minute}, WithHybrid(time.Minute, 10), WithReplicas(1))
	for range 2 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("warm-up: %+v %v", d, err)
		}
	}
	d, err := l.AllowN(staleDeadline{ctx}, "k", 1)
	if d.Allowed || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a caller whose deadline had passed: %+v %v, want not admitted, wrapping DeadlineExceeded (stats %+v)", d, err, l.Stats())
	}
}
