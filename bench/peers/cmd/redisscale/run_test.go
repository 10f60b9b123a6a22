package main

import (
	"os/exec"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.99: 10, 0.1: 1, 0: 1} {
		if got := quantile(s, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %v", got)
	}
}

func TestHybridBound(t *testing.T) {
	for _, c := range []struct {
		limit, maxLocal int64
		r               int
		want            int64
	}{{2000, 10, 1, 2000}, {2000, 10, 2, 3000}, {2000, 10, 16, 2000 + 15*125}, {100, 10, 16, 100 + 15*30}} {
		if got := hybridBound(c.limit, c.maxLocal, c.r); got != c.want {
			t.Errorf("hybridBound(%d, %d, %d) = %d, want %d", c.limit, c.maxLocal, c.r, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	ms := []metrics{{rate: 3, p99: 10, hotMax: 5}, {rate: 1, p99: 30, hotMax: 9, errors: 1}, {rate: 2, p99: 20, hotMax: 7}}
	got := median(ms)
	if got.rate != 2 || got.p99 != 20 || got.hotMax != 9 || got.errors != 1 {
		t.Errorf("median = %+v, want rate 2, p99 20, and the largest hotMax (9) and errors (1)", got)
	}
	if got := median(ms[:2]); got.rate != 2 || got.p99 != 20 {
		t.Errorf("median of two = %+v, want their means (rate 2, p99 20)", got)
	}
}

// A short run of each mode against a server of its own: decisions made,
// none failed, the plain mode exact on the hot keys, and each decision
// costing at most one script call in the plain mode.
func TestRunOnce(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (Debian: redis-server)")
	}
	addr, stop, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p := params{callers: 4, dur: 200 * time.Millisecond, window: time.Minute, tenants: 1000, skew: 1.1, hot: 2, hotLimit: 50, limit: 1_000_000,
		hotShare: 0.5, interval: 5 * time.Millisecond, maxLocal: 5, nodes: []string{addr}}
	for i, mode := range []string{"plain", "hybrid"} {
		res, err := runOnce(p, mode, 2, "t"+mode+":")
		if err != nil {
			t.Fatal(err)
		}
		t.Log(res.metrics().row(p, mode, 2))
		if res.decisions == 0 || res.errors != 0 {
			t.Fatalf("%s: %+v", mode, res)
		}
		if i == 0 && (res.hotMax > p.hotLimit || res.scriptCalls > res.decisions) {
			t.Fatalf("plain: %+v: the hot keys are exact, and each decision is one script call", res)
		}
		// The scripts' time is wall time (commandstats' usec), which on a
		// machine whose cores are shared can exceed the server's CPU time.
		if res.inScripts <= 0 || res.clientCPU <= 0 {
			t.Fatalf("%s: %+v: the scripts' time and the client's CPU time are counted", mode, res)
		}
	}
}
