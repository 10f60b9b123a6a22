package engine

import (
	"runtime"
	"sync"
	"testing"
)

// TestAuditRingPairsConcurrent: producers mix single pushes with pairs
// (pushPair, a yield, then fill) through a small ring for many laps while
// one consumer pops. Every event pushed is popped exactly once, a pair's
// second event always right after its first (the consumer waits at the
// claimed cell), and a failed pair pushed neither.
func TestAuditRingPairsConcurrent(t *testing.T) {
	t.Run("laps", func(t *testing.T) { testAuditRingPairs(t, 64, false) })
	// A ring larger than everything pushed: no push may report it full
	// (a pair that read a claimed, not yet written cell as free once did,
	// instead of reloading the tail).
	t.Run("never-full", func(t *testing.T) { testAuditRingPairs(t, 1<<16, true) })
}

func testAuditRingPairs(t *testing.T, size int, neverFull bool) {
	const producers, each = 8, 4000
	r := newAuditRing(size)
	type rec struct{ first, second bool }
	pushed := make([][]rec, producers)
	var wg sync.WaitGroup
	for p := range producers {
		pushed[p] = make([]rec, each)
		wg.Go(func() {
			for i := range each {
				ev := auditEvent{key: "k", t: int64(p), n: int64(i)}
				if i%2 == 0 {
					_, pushed[p][i].first = r.push(ev, 0)
					continue
				}
				pos, ok := r.pushPair(ev)
				if ok {
					runtime.Gosched() // the consumer may reach the claimed cell meanwhile
					ev.kind = evKept
					r.fill(pos+1, ev)
				}
				pushed[p][i] = rec{ok, ok}
			}
		})
	}
	seen := make([][]rec, producers)
	for p := range seen {
		seen[p] = make([]rec, each)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var prev auditEvent
	havePrev := false
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		for {
			ev, ok := r.pop()
			if !ok {
				break
			}
			s := &seen[ev.t][ev.n]
			if ev.kind == evKept {
				if s.second || !havePrev || prev.t != ev.t || prev.n != ev.n || prev.pos+1 != ev.pos {
					t.Fatalf("a pair's second event %+v does not follow its first (previous %+v)", ev, prev)
				}
				s.second = true
			} else {
				if s.first {
					t.Fatalf("event %+v popped twice", ev)
				}
				s.first = true
			}
			prev, havePrev = ev, true
		}
		if finished {
			break
		}
	}
	for p := range producers {
		for i := range each {
			if neverFull && !pushed[p][i].first {
				t.Fatalf("producer %d event %d: reported full in a ring of %d cells holding at most %d events", p, i, size, producers*each*3/2)
			}
			if seen[p][i] != pushed[p][i] {
				t.Fatalf("producer %d event %d: pushed %+v, popped %+v", p, i, pushed[p][i], seen[p][i])
			}
		}
	}
}
