package engine_test

// From a third adversarial review, of the settled-window cache and layout:
// the one defect it found (in SetLimitAt, not the cache), failing before its
// fix.

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// adversary3: SetLimitAt at time T on a key last used 2^21 sub-windows
// before T, then AllowAt at T: the override just set must hold.
func TestAdversary3SetLimitThenFarAllow(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		w := time.Millisecond
		cfg := engine.Config{Limit: 1, Window: 10 * w, SubWindows: 10, Algorithm: alg, DisableEviction: true, PerKeyLimits: true}
		if alg == engine.FixedWindow || alg == engine.SlidingLog {
			cfg.SubWindows = 0
			cfg.Window = w
		}
		e, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Unix(1_700_000_000, 0)
		e.AllowAt("k", 1, t0)
		far := t0.Add(time.Duration(1<<21) * w)
		if err := e.SetLimitAt("k", 5, far); err != nil {
			t.Fatal(err)
		}
		d := e.AllowAt("k", 1, far)
		if d.Limit != 5 || d.Remaining != 4 {
			t.Errorf("%v: SetLimitAt(k, 5, far) then AllowAt(k, 1, far) = %+v, want Limit 5, Remaining 4", alg, d)
		}
		e.Close()
	}
}
