package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Reset forgets the key "for every replica"; another hybrid replica
// learns of it at its next flush (Reset's doc): until then it may deny the
// key from its last observation, and after that flush it admits. Replica B
// fills the key with one exact decision (a cost above maxLocal), replica
// A's first decision is an exact denial, then B resets the key. Redis
// holds nothing for the key and nothing is unsent anywhere; once A has
// flushed (driven by the test: the interval is the Window, so no flush
// runs on its own whatever the machine's speed), A admits.
func TestHybridResetByOtherReplicaSeenAtItsNextFlush(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 10, Window: time.Minute}
	a := mustNew(t, client(t, s), cfg, WithHybrid(time.Minute, 1), WithReplicas(2))
	b := mustNew(t, client(t, s), cfg, WithHybrid(time.Minute, 1), WithReplicas(2))
	if d, err := b.AllowN(ctx, "k", 10); err != nil || !d.Allowed {
		t.Fatalf("B fills the key: %+v %v", d, err)
	}
	d, err := a.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter < time.Second {
		t.Fatalf("A on the full key: %+v %v, want an exact denial", d, err)
	}
	if err := b.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := storedUnits(t, client(t, s), a, "k"); n != 0 {
		t.Fatalf("Redis holds %d units after the Reset", n)
	}
	a.flushNow()
	d, err = a.AllowN(ctx, "k", 1)
	if err != nil || !d.Allowed {
		t.Errorf("A after B's Reset of the key and A's next flush (Redis empty, nothing unsent): %+v %v; want admitted (stats %+v)", d, err, a.Stats())
	}
}

// Reset: units other replicas admitted locally and have not sent yet
// still count in the fresh window (up to each one's local allowance, a
// share of the key's headroom, far above maxLocal far below the limit).
// Replica A admits 1,000 units locally on a key far below its limit, none
// sent (the interval is the Window: no flush runs during the test), and
// no batch is in flight; B resets the key; A's Close then sends its
// units: the fresh window holds every one of them, no more, no fewer.
func TestHybridResetOtherReplicasUnsentCountInTheFreshWindow(t *testing.T) {
	s := redistest.Start(t)
	const maxLocal = 10
	cfg := engine.Config{Limit: 100_000, Window: time.Minute}
	a := mustNew(t, client(t, s), cfg, WithHybrid(time.Minute, maxLocal), WithReplicas(2))
	b := mustNew(t, client(t, s), cfg, WithHybrid(time.Minute, maxLocal), WithReplicas(2))
	for i := range 1001 { // the first is exact, the rest local
		if d, err := a.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	if st := a.Stats(); st.LocalDecisions != 1000 {
		t.Fatalf("A decided %d locally, want 1,000 (stats %+v)", st.LocalDecisions, st)
	}
	if err := b.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedUnits(t, client(t, s), a, "k"); got != 1000 {
		t.Errorf("after B's Reset the fresh window holds %d of the 1,000 units A admitted locally and had not sent, want all of them (A's stats %+v)", got, a.Stats())
	}
}
