package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunJSON runs the real tool, briefly, and checks the report.
func TestRunJSON(t *testing.T) {
	for _, alg := range []string{"strict", "sliding", "fixed"} {
		t.Run(alg, func(t *testing.T) {
			dir := t.TempDir()
			cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
			args := []string{"-duration", "300ms", "-tenants", "1000", "-json", "-algorithm", alg, "-seed", "7", "-live-audit", "0.05"}
			if alg == "strict" {
				args = append(args, "-cpuprofile", cpu, "-memprofile", mem, "-pprof", "127.0.0.1:0", "-clock", "coarse")
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}

			// stdout is exactly one JSON object with the documented fields.
			dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
			var raw map[string]any
			if err := dec.Decode(&raw); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
			}
			if _, err := dec.Token(); err != io.EOF {
				t.Fatalf("stdout holds more than one JSON value: %q", stdout.String())
			}
			for _, f := range []string{"config", "elapsed_seconds", "decisions", "allowed", "denied", "decisions_per_second",
				"latency", "tiers", "keys", "memory", "audit"} {
				if _, ok := raw[f]; !ok {
					t.Errorf("JSON lacks %q", f)
				}
			}
			for obj, fields := range map[string][]string{
				"latency": {"p50_ns", "p99_ns", "p999_ns", "samples", "method"},
				"memory":  {"bytes_per_key", "gc_pause_total_ns", "baseline_heap_bytes", "final_heap_bytes"},
				"audit":   {"mismatch_share", "worst_overshoot", "worst_warm_overshoot", "false_allows", "false_denies", "within_bound", "per_tenant"},
			} {
				m, _ := raw[obj].(map[string]any)
				for _, f := range fields {
					if _, ok := m[f]; !ok {
						t.Errorf("JSON %s lacks %q", obj, f)
					}
				}
			}

			var r report
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.Config.Algorithm != alg || r.Config.Tenants != 1000 || r.Config.Sample != 64 {
				t.Errorf("config = %+v", r.Config)
			}
			if r.Decisions <= 0 || r.DecisionsPerSecond <= 0 {
				t.Errorf("decisions = %d, throughput = %v; want > 0", r.Decisions, r.DecisionsPerSecond)
			}
			if r.Allowed+r.Denied != r.Decisions {
				t.Errorf("allowed %d + denied %d != decisions %d", r.Allowed, r.Denied, r.Decisions)
			}
			var tierSum, tenants int64
			for _, tr := range r.Tiers {
				tierSum += tr.Allowed + tr.Denied
				tenants += int64(tr.Tenants)
			}
			if tierSum != r.Decisions || tenants != 1000 || len(r.Tiers) != 3 {
				t.Errorf("tiers = %+v: sum %d, tenants %d", r.Tiers, tierSum, tenants)
			}
			if l := r.Latency; l.Samples == 0 || l.P50Ns <= 0 || l.P50Ns > l.P99Ns || l.P99Ns > l.P999Ns || l.P999Ns > l.MaxNs {
				t.Errorf("latency = %+v", l)
			}
			if r.Keys.Live < 1 || r.Keys.Live > 1000 {
				t.Errorf("live keys = %d, want 1 … 1000", r.Keys.Live)
			}
			if r.Memory.BytesPerKey <= 0 {
				t.Errorf("bytes per key = %v, want > 0", r.Memory.BytesPerKey)
			}

			// The engine's self-audit and the offline audit of the same
			// tenants agree on the real load, unless the machine starved
			// the audit's drain so that its buffer dropped entries (a
			// loaded machine, -race): then the report must say they
			// disagree, and name the drops. TestLiveAuditAgrees checks
			// agreement at fixed instants, where nothing can drop.
			la := r.LiveAudit
			if la.Tenants == 0 || la.Engine.Decisions == 0 || r.Config.LiveAudit != 0.05 {
				t.Errorf("live audit: %+v", la)
			}
			if la.Engine.Dropped == 0 && !la.Agree {
				t.Errorf("live audit disagrees with nothing dropped: %+v", la)
			}
			if la.Engine.Dropped > 0 {
				if la.Agree || !strings.Contains(strings.Join(la.Differences, ";"), "dropped") {
					t.Errorf("live audit dropped %d entries but reports %+v", la.Engine.Dropped, la)
				}
				t.Logf("live audit: %d entries dropped under this machine's load; agreement not judged", la.Engine.Dropped)
			}
			a := r.Audit
			if a.Tenants != 64 || len(a.PerTenant) != 64 || a.Decisions <= 0 {
				t.Errorf("audit: %d tenants, %d listed, %d decisions", a.Tenants, len(a.PerTenant), a.Decisions)
			}
			if a.MismatchShare < 0 || a.MismatchShare > 1 {
				t.Errorf("mismatch share = %v, want within [0, 1]", a.MismatchShare)
			}
			if !a.WithinBound {
				t.Errorf("audit: worst overshoot %v exceeds the %s bound %s", a.WorstOvershoot, alg, a.Bound)
			}
			switch alg {
			case "strict":
				if a.WorstOvershoot > 1.0 {
					t.Errorf("strict: worst overshoot = %v, want ≤ 1.0", a.WorstOvershoot)
				}
				for _, f := range []string{cpu, mem} {
					if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
						t.Errorf("profile %s: %v (empty?)", f, err)
					}
				}
				if !strings.Contains(stderr.String(), "pprof on http://127.0.0.1:") {
					t.Errorf("stderr does not announce the pprof server:\n%s", stderr.String())
				}
			case "sliding":
				if a.WorstOvershoot >= 2.0 {
					t.Errorf("sliding: worst overshoot = %v, want < 2.0", a.WorstOvershoot)
				}
			case "fixed":
				if a.WorstOvershoot > 2.0 {
					t.Errorf("fixed: worst overshoot = %v, want ≤ 2.0", a.WorstOvershoot)
				}
			}
		})
	}
}

func TestRunText(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-duration", "100ms", "-tenants", "10", "-workers", "3"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"throughput", "latency", "p99.9", "per tier", "bytes/key", "gc ", "audit", "10 tenants", "worst overshoot", "live audit"} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the message: the flag's name
	}{
		{"zipf below 1", []string{"-zipf", "0.5"}, "-zipf"},
		{"zipf exactly 1", []string{"-zipf", "1"}, "-zipf"},
		{"zipf NaN", []string{"-zipf", "NaN"}, "-zipf"},
		{"no tenants", []string{"-tenants", "0"}, "-tenants"},
		{"too many tenants", []string{"-tenants", "10000001"}, "-tenants"},
		{"zero duration", []string{"-duration", "0s"}, "-duration"},
		{"negative duration", []string{"-duration", "-1s"}, "-duration"},
		{"unparsable duration", []string{"-duration", "soon"}, "-duration"},
		{"no workers", []string{"-workers", "0"}, "-workers"},
		{"zero window", []string{"-window", "0s"}, "-window"},
		{"no sub-windows", []string{"-subwindows", "0"}, "-subwindows"},
		{"too many sub-windows", []string{"-subwindows", "1001"}, "-subwindows"},
		{"window not divisible", []string{"-window", "1s", "-subwindows", "7"}, "-subwindows"},
		{"unknown algorithm", []string{"-algorithm", "leaky"}, "-algorithm"},
		{"unknown clock", []string{"-clock", "fast"}, "-clock"},
		{"negative sample", []string{"-sample", "-1"}, "-sample"},
		{"huge sample", []string{"-sample", "10001"}, "-sample"},
		{"live audit above one", []string{"-live-audit", "1.5"}, "-live-audit = 1.5"},
		{"live audit negative", []string{"-live-audit", "-0.1"}, "-live-audit = -0.1"},
		{"live audit NaN", []string{"-live-audit", "NaN"}, "-live-audit = NaN"},
		{"live audit in accuracy mode", []string{"-mode", "accuracy", "-live-audit", "0.1"}, "-live-audit applies only to -mode load"},
		{"pprof on all interfaces", []string{"-pprof", "0.0.0.0:6060"}, "-pprof"},
		{"pprof with no host", []string{"-pprof", ":6060"}, "-pprof"},
		{"pprof on a public host", []string{"-pprof", "example.com:6060"}, "-pprof"},
		{"pprof without a port", []string{"-pprof", "127.0.0.1"}, "-pprof"},
		{"unknown flag", []string{"-speed", "9"}, "-speed"},
		{"unknown mode", []string{"-mode", "fast"}, "-mode"},
		{"accuracy with a load flag", []string{"-mode", "accuracy", "-tenants", "5"}, "-tenants"},
		{"accuracy with a 1s window", []string{"-mode", "accuracy", "-window", "1s"}, "-window"},
		{"accuracy with no limit", []string{"-mode", "accuracy", "-limit", "0"}, "-limit"},
		{"accuracy with a huge limit", []string{"-mode", "accuracy", "-limit", "1001"}, "-limit"},
		{"accuracy with no out", []string{"-mode", "accuracy", "-out", ""}, "-out"},
		{"out in load mode", []string{"-out", "x"}, "-out"},
		{"quick in load mode", []string{"-quick"}, "-quick"},
		{"stray argument", []string{"now"}, "now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("message does not name %s:\n%s", tc.want, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
	if !strings.Contains(stderr.String(), "-zipf") {
		t.Errorf("-h does not list the flags:\n%s", stderr.String())
	}
}

func TestKeyLimitAndPlan(t *testing.T) {
	p := newPlan(options{tenants: 1000, seed: 1, sample: 64, zipf: 1.1})
	if p.keys[7] != "tenant-000007" || p.keys[999] != "tenant-000999" {
		t.Errorf("keys: %q, %q", p.keys[7], p.keys[999])
	}
	if p.tierTenants != [numTiers]int{700, 250, 50} {
		t.Errorf("tier sizes = %v, want 700/250/50", p.tierTenants)
	}
	for i, k := range p.keys {
		if got, want := p.tier.keyLimit(k), tierLimits[p.tier[i]]; got != want {
			t.Fatalf("keyLimit(%q) = %d, want %d", k, got, want)
		}
	}
	for _, k := range []string{"", "tenant-", "tenant-1000", "tenant-00x", "other-000001", "tenant-99999999999999999999"} {
		if got := p.tier.keyLimit(k); got != 0 {
			t.Errorf("keyLimit(%q) = %d, want 0 (the default)", k, got)
		}
	}
	// Audited tenants: distinct, consistent, reaching the coldest rank.
	seen := map[int]bool{}
	for slot, ae := range p.audited {
		if seen[ae.tenant] || p.audit[ae.tenant] != int32(slot) || int(p.perm[ae.rank]) != ae.tenant {
			t.Fatalf("audit slot %d = %+v is inconsistent", slot, ae)
		}
		seen[ae.tenant] = true
	}
	if len(p.audited) != 64 || p.audited[63].rank != 999 {
		t.Errorf("audited = %d tenants, last rank %d", len(p.audited), p.audited[63].rank)
	}
	if wide := newPlan(options{tenants: 1_234_567, seed: 1, zipf: 1.1}); wide.keys[5] != "tenant-0000005" {
		t.Errorf("wide key = %q", wide.keys[5])
	}
}

func TestLatencyDecimation(t *testing.T) {
	w := &worker{lat: make([]uint32, 0, 8), stride: sampleEvery}
	for call := range uint64(100 * sampleEvery) { // as run samples: at multiples of the stride
		if call&(w.stride-1) == 0 {
			w.sample(time.Duration(call))
		}
	}
	// 100 samples' worth in a buffer of 8: the stride grew to 16·64, and the
	// buffer holds 0, s, 2s, … at the final stride s.
	if w.stride != 16*sampleEvery || len(w.lat) == 0 || len(w.lat) > cap(w.lat) {
		t.Fatalf("stride %d, lat %v", w.stride, w.lat)
	}
	for i, x := range w.lat {
		if uint64(x) != uint64(i)*w.stride {
			t.Fatalf("stride %d, lat %v: not evenly spread", w.stride, w.lat)
		}
	}
}

func TestCommas(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := commas(in); got != want {
			t.Errorf("commas(%d) = %q, want %q", in, got, want)
		}
	}
}

// TestAccuracyMode runs the accuracy lab, reduced, and checks what it writes.
func TestAccuracyMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "docs")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-mode", "accuracy", "-quick", "-out", dir, "-seed", "3"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"| Algorithm |", "fixed window", "sliding window counter, N=60", "strict counter, N=1", "accuracy.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, accuracyMD))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{accuracyCommand + " -quick", "## Summary", "## Where the seed's table was wrong", "(1+1/N)", "](accuracy.svg)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("%s lacks %q", accuracyMD, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, accuracySVG)); err != nil || fi.Size() == 0 {
		t.Errorf("%s: %v (empty?)", accuracySVG, err)
	}
}

// TestAccuracyModeWritesToTheCurrentDirectory: without -out the lab writes
// into the current directory, never into the repository's docs/, and the
// report names the command that made it.
func TestAccuracyModeWritesToTheCurrentDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-mode", "accuracy", "-quick"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, accuracyMD))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Generated by `" + accuracyCommand + " -quick`"; !strings.Contains(string(md), want) {
		t.Errorf("%s lacks %q", accuracyMD, want)
	}
	if _, err := os.Stat(filepath.Join(dir, accuracySVG)); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "docs")); !os.IsNotExist(err) {
		t.Errorf("a docs directory was made in the current directory: %v", err)
	}
}
