package engine_test

// Tests written by a second adversarial review of the engine (public API
// and documented promises): ADV2-n tests reproduce the defects it found,
// each failing before its fix; "Held" tests the attacks that did not break
// it.

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Held: the first review's jump script (2^20, 2^21, 2^23, 2^24 sub-window
// jumps and multiples of N+1) at N = 1000 and N = 999, 1.
func TestAdv2ReferenceTagJumpsWideN(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 1))
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict} {
		for _, N := range []int{1, 999, 1000} {
			for _, w := range []int64{1, 13} {
				for seed := 0; seed < scaled(1, 4); seed++ {
					if err := runAdvJumps(alg, N, w, rng); err != nil {
						t.Fatalf("%v N=%d w=%d: %v", alg, N, w, err)
					}
				}
			}
		}
	}
}

// Held: a slot written once, then the key moved by steps just under the
// settle threshold and just under the revive gap, so that one slot is
// never the current one (steps that are multiples of N+1 keep landing on
// another index) — the slot must never be counted again.
func TestAdv2SettleKeepsAnUntouchedSlotDead(t *testing.T) {
	for _, N := range []int{1, 3, 1000} {
		for _, step := range []int64{1<<20 - 1, 1 << 20, 1<<21 - 1} {
			e := newEngine(t, engine.Config{Limit: 3, Window: time.Duration(N), SubWindows: N, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
			slots := int64(N + 1)
			s := step / slots * slots // keep the current index fixed
			if s == 0 {
				s = slots
			}
			now := int64(1 << 40)
			require.True(t, e.AllowAt("k", 2, time.Unix(0, now)).Allowed) // slot i full
			now++                                                         // next index, then walk in multiples of N+1
			require.True(t, e.AllowAt("k", 1, time.Unix(0, now)).Allowed)
			for j := 0; j < 40; j++ {
				now += s
				d := e.AllowAt("k", 0, time.Unix(0, now))
				assert.Equal(t, int64(3), d.Remaining, "N=%d step=%d j=%d: stale slot counted (peek)", N, s, j)
				d = e.AllowAt("k", 1, time.Unix(0, now))
				require.True(t, d.Allowed, "N=%d step=%d j=%d: %+v", N, s, j, d)
				// the slot of the original burst is at index (now−1−N) … it
				// stands for now−1 at the next step: check the full window
				d = e.AllowAt("k", 0, time.Unix(0, now+1))
				assert.Equal(t, int64(2), d.Remaining, "N=%d step=%d j=%d: next sub-window", N, s, j)
			}
		}
	}
}
