package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestMaxKeyBytesBadConfig: a negative or absurdly large MaxKeyBytes is
// refused by New, with the field and its range named; 0 means the default.
func TestMaxKeyBytesBadConfig(t *testing.T) {
	for _, v := range []int{-1, engine.MaxKeyBytesCeiling + 1, 1 << 40} {
		_, err := engine.New(engine.Config{Limit: 1, Window: time.Second, MaxKeyBytes: v})
		if err == nil || !strings.Contains(err.Error(), "Config.MaxKeyBytes") || !strings.Contains(err.Error(), "1 … 1048576") {
			t.Fatalf("MaxKeyBytes = %d: err %v, want one naming Config.MaxKeyBytes and 1 … %d", v, err, engine.MaxKeyBytesCeiling)
		}
	}
	for v, want := range map[int]int{0: engine.DefaultMaxKeyBytes, 1: 1, engine.MaxKeyBytesCeiling: engine.MaxKeyBytesCeiling} {
		e, err := engine.New(engine.Config{Limit: 1, Window: time.Second, MaxKeyBytes: v, DisableEviction: true})
		if err != nil {
			t.Fatalf("MaxKeyBytes = %d: %v", v, err)
		}
		if got := e.Config().MaxKeyBytes; got != want {
			t.Fatalf("MaxKeyBytes = %d: Config() says %d, want %d", v, got, want)
		}
		e.Close()
	}
}

// TestKeyTooLongRefusedEverywhere: a key one byte over the cap is refused
// by every decision entry point with ReasonKeyTooLong (Limit 0, Remaining
// 0, RetryAfter Never), stores nothing, never reaches KeyLimit, allocates
// nothing, and a key of exactly the cap is decided as usual.
func TestKeyTooLongRefusedEverywhere(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, max := range []int{0, 16} {
			t.Run(fmt.Sprintf("%v/max=%d", alg, max), func(t *testing.T) { testKeyTooLong(t, alg, max) })
		}
	}
}

func testKeyTooLong(t *testing.T, alg engine.Algorithm, max int) {
	capBytes := max
	if capBytes == 0 {
		capBytes = engine.DefaultMaxKeyBytes
	}
	var keyLimitCalls atomic.Int64
	clk := engine.NewManualClock(t0)
	e, err := engine.New(engine.Config{
		Limit: 3, Window: time.Second, Algorithm: alg, MaxKeyBytes: max, Clock: clk,
		KeyLimit: func(string) int64 { keyLimitCalls.Add(1); return 0 },
		Audit:    1, // an audited engine stores nothing for it either
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	long := strings.Repeat("k", capBytes+1)
	fits := strings.Repeat("k", capBytes)
	want := engine.Decision{RetryAfter: engine.Never}
	check := func(what string, d engine.Decision) {
		t.Helper()
		if d != want || d.Reason() != engine.ReasonKeyTooLong {
			t.Fatalf("%s: %+v (%v), want %+v (key-too-long)", what, d, d.Reason(), want)
		}
	}
	if e.Allow(long) {
		t.Fatal("Allow admitted a key over MaxKeyBytes")
	}
	for _, n := range []int64{1, 0, -1, 4} {
		check("AllowN", e.AllowN(long, n))
		check("AllowAt", e.AllowAt(long, n, t0))
		r := e.Reserve(long, n)
		check("Reserve", r.Decision())
		if r.Cancel() {
			t.Fatal("Cancel of a refused reservation returned true")
		}
		r2 := e.ReserveAt(long, n, t0)
		check("ReserveAt", r2.Decision())
	}
	i, d := engine.AllowAll(t0, engine.Request{Engine: e, Key: "short", N: 1}, engine.Request{Engine: e, Key: long, N: 1})
	if i != 1 {
		t.Fatalf("AllowAll: index %d, want 1", i)
	}
	check("AllowAll", d)
	if got := e.AllowAt("short", 0, t0).Remaining; got != 3 {
		t.Fatalf("AllowAll kept the first part: Remaining %d, want 3", got)
	}
	d, err = e.Wait(context.Background(), long, 1)
	check("Wait", d)
	if !errors.Is(err, engine.ErrNeverAdmitted) || !strings.Contains(err.Error(), "MaxKeyBytes") || strings.Contains(err.Error(), long) {
		t.Fatalf("Wait: %v, want ErrNeverAdmitted naming MaxKeyBytes, without the key", err)
	}
	for _, err := range []error{e.SetLimit(long, 2), e.SetLimitAt(long, 2, t0)} {
		if err == nil || !strings.Contains(err.Error(), "Config.MaxKeyBytes") || strings.Contains(err.Error(), long) {
			t.Fatalf("SetLimit: %v, want an error naming Config.MaxKeyBytes, without the key", err)
		}
	}
	e.Audit()                     // drain: nothing of the long key was shadowed
	if got := e.Len(); got != 1 { // "short" only
		t.Fatalf("Len %d after refusals, want 1 (nothing stored for the long key)", got)
	}
	before := keyLimitCalls.Load()
	allocs := testing.AllocsPerRun(100, func() {
		e.Allow(long)
		e.AllowN(long, 1)
		e.AllowAt(long, 1, t0)
		r := e.ReserveAt(long, 1, t0)
		r.Cancel()
	})
	if allocs != 0 {
		t.Fatalf("refusing a long key allocates %v per run", allocs)
	}
	if keyLimitCalls.Load() != before || before != 1 { // once, for "short"
		t.Fatalf("KeyLimit called %d times, want once (for the short key only)", keyLimitCalls.Load())
	}
	// The cap itself is inclusive.
	if d := e.AllowAt(fits, 1, t0); !d.Allowed || d.Limit != 3 {
		t.Fatalf("a key of exactly MaxKeyBytes: %+v, want admitted at limit 3", d)
	}
	if err := e.SetLimitAt(fits, 2, t0); err != nil {
		t.Fatalf("SetLimitAt on a key of exactly MaxKeyBytes: %v", err)
	}
}

// TestKeyTooLongReasonEncoding: the Decision another backend builds for a
// key refused for its length classifies as ReasonKeyTooLong, and AllowAll's
// nil-engine refusal stays ReasonNever.
func TestKeyTooLongReasonEncoding(t *testing.T) {
	if r := (engine.Decision{RetryAfter: engine.Never}).Reason(); r != engine.ReasonKeyTooLong || r.String() != "key-too-long" {
		t.Fatalf("Decision{RetryAfter: Never}.Reason() = %v", r)
	}
	if _, d := engine.AllowAll(t0, engine.Request{Key: "k", N: 1}); d.Reason() != engine.ReasonNever {
		t.Fatalf("nil engine: %+v (%v), want ReasonNever", d, d.Reason())
	}
}
