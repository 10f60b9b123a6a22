package engine_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Skip records are bounded: "skip records (with a copy of the key) for at
// most max(AuditMaxKeys, 4,096) + AuditMaxKeys keys". 100,000 distinct
// 1 KiB keys kept out within one window, with reservations cancelled: the
// audit's extra heap must stay near 8,193 key copies (~8 MiB + overhead),
// not grow with the keys.
func TestReview5AuditSkipMemory(t *testing.T) {
	if raceOn13 {
		t.Skip()
	}
	pad := strings.Repeat("x", 1024)
	run := func(audit float64) int64 {
		cfg := engine.Config{Limit: 10, Window: time.Hour, Audit: audit, DisableEviction: true}
		if audit > 0 {
			cfg.AuditMaxKeys = 1
		}
		e := advNew(t, cfg)
		h0 := adv5Heap()
		for i := 0; i < 100_000; i++ {
			k := fmt.Sprint(i, pad)
			r := e.ReserveAt(k, 1, advMs(advT0, i/100))
			r.Cancel()
			if i%5000 == 0 {
				e.Audit()
			}
		}
		rep := e.Audit()
		h := int64(adv5Heap()) - int64(h0)
		t.Logf("audit=%v: +%d MB %+v", audit, h>>20, rep)
		return h
	}
	off := run(0)
	on := run(1)
	if extra := on - off; extra > 32<<20 {
		t.Errorf("audit holds %d MB more than the engine alone for 100,000 skipped keys", extra>>20)
	}
}

func adv5Heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
