package adapter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

func mustBackend(t *testing.T, l any) Backend {
	t.Helper()
	b, err := NewBackend(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// All engines: AllowAll at the first engine's clock, all or nothing; read
// fills the fields of the policies AllowAll does not report, up to the
// refusing one.
func TestMultiOfEnginesIsAllOrNothing(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	a := newTestEngine(t, engine.Config{Limit: 5, Window: time.Second, Clock: clk, DisableEviction: true})
	b := newTestEngine(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk, DisableEviction: true})
	c := newTestEngine(t, engine.Config{Limit: 9, Window: time.Second, Clock: clk, DisableEviction: true})
	m := NewMulti([]Backend{mustBackend(t, a), mustBackend(t, b), mustBackend(t, c)})
	if mb := m.Backend(1); !m.AllOrNothing() || m.Len() != 3 || mb.Engine() != b {
		t.Fatalf("AllOrNothing %v, Len %d", m.AllOrNothing(), m.Len())
	}
	keys := []string{"ka", "kb", "kc"}
	ds, have := make([]engine.Decision, 3), make([]bool, 3)
	v := m.Decide(context.Background(), keys, []int64{2, 2, 2}, true, ds, have)
	if v.At != -1 || v.Now != clk.UnixNano() || v.Failed || v.Failure || v.Gone != nil {
		t.Fatalf("admitted: %+v", v)
	}
	for i, want := range []int64{3, 0, 7} {
		if !have[i] || ds[i].Remaining != want {
			t.Errorf("policy %d: have %v, Remaining %d, want %d", i, have[i], ds[i].Remaining, want)
		}
	}
	ds, have = make([]engine.Decision, 3), make([]bool, 3)
	v = m.Decide(context.Background(), keys, []int64{1, 1, 1}, true, ds, have)
	if v.At != 1 || !have[0] || !have[1] || have[2] || ds[1].Allowed {
		t.Fatalf("refused by b: %+v have %v ds %+v", v, have, ds)
	}
	if ds[0].Remaining != 3 {
		t.Errorf("a was charged for a refused request: Remaining %d, want 3", ds[0].Remaining)
	}
	// Without read, only the refusing policy has fields.
	ds, have = make([]engine.Decision, 3), make([]bool, 3)
	if v := m.Decide(context.Background(), keys, []int64{1, 1, 1}, false, ds, have); v.At != 1 || have[0] || !have[1] {
		t.Errorf("no read: %+v have %v", v, have)
	}
	// Engines without a Clock decide at the wall clock.
	d := newTestEngine(t, engine.Config{Limit: 1, Window: time.Second})
	m = NewMulti([]Backend{mustBackend(t, d)})
	if v := m.Decide(context.Background(), []string{"k"}, []int64{1}, false, make([]engine.Decision, 1), make([]bool, 1)); v.At != -1 || v.Now == 0 {
		t.Errorf("wall clock: %+v", v)
	}
}

// With a ContextLimiter among them, the policies are asked in order and
// the first refusal stops the walk; a failure follows its failure policy,
// unless the caller has gone.
func TestMultiInOrderWithAContextLimiter(t *testing.T) {
	fail := errors.New("redis down")
	open := &remoteStub{d: engine.Decision{Allowed: true, Limit: 4, Remaining: 4}, err: fail}
	closed := &remoteStub{d: engine.Decision{Limit: 4}, err: fail}
	ok := &remoteStub{d: engine.Decision{Allowed: true, Limit: 4, Remaining: 3}}
	limited := &remoteStub{d: engine.Decision{Limit: 4, Remaining: 0, RetryAfter: time.Second}}
	e := newTestEngine(t, engine.Config{Limit: 3, Window: time.Second})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name     string
		ctx      context.Context
		ls       []any
		want     Verdict
		have     []bool
		askedOK  int // how many times ok was asked
		askedLim int
	}{
		{"all admit", context.Background(), []any{e, ok}, Verdict{At: -1}, []bool{true, true}, 1, 0},
		{"refused by the second", context.Background(), []any{ok, limited, e}, Verdict{At: 1}, []bool{true, true, false}, 1, 1},
		{"fail open goes on", context.Background(), []any{open, ok}, Verdict{At: -1, Failed: true}, []bool{false, true}, 1, 0},
		{"fail closed refuses", context.Background(), []any{ok, closed, limited}, Verdict{At: 1, Failed: true, Failure: true}, []bool{true, false, false}, 1, 0},
		{"caller gone", gone, []any{ok, open}, Verdict{At: 1, Gone: context.Canceled}, []bool{true, false}, 1, 0},
		// Past its deadline, its timer not fired: gone all the same.
		{"deadline passed", adaptertest.LateTimer(context.Background()), []any{ok, open}, Verdict{At: 1, Gone: context.DeadlineExceeded}, []bool{true, false}, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok.got, limited.got = nil, nil
			var bs []Backend
			for _, l := range c.ls {
				bs = append(bs, mustBackend(t, l))
			}
			m := NewMulti(bs)
			if m.AllOrNothing() {
				t.Fatal("AllOrNothing with a ContextLimiter")
			}
			keys := make([]string, len(bs))
			for i := range keys {
				keys[i] = "k"
			}
			ds, have := make([]engine.Decision, len(bs)), make([]bool, len(bs))
			v := m.Decide(c.ctx, keys, ones(len(keys)), true, ds, have)
			if v != c.want {
				t.Errorf("Verdict %+v, want %+v", v, c.want)
			}
			for i := range have {
				if have[i] != c.have[i] {
					t.Errorf("have = %v, want %v", have, c.have)
					break
				}
			}
			if v.Failure && ds[v.At] != closed.d {
				t.Errorf("the failure's Decision %+v, want the failure policy's %+v", ds[v.At], closed.d)
			}
			if len(ok.got) != c.askedOK || len(limited.got) != c.askedLim {
				t.Errorf("asked ok %d times, limited %d; want %d, %d", len(ok.got), len(limited.got), c.askedOK, c.askedLim)
			}
		})
	}
}

func TestBuildMulti(t *testing.T) {
	e := newTestEngine(t, engine.Config{Limit: 3, Window: time.Second})
	r := &remoteStub{}
	m, fields, errs := BuildMulti("httplimit: ", "NewMulti", []PolicySpec{{Name: "a", Limiter: e}, {Name: "b", Limiter: r, Window: 2 * time.Second}}, nil)
	if errs != nil || m.Len() != 2 || len(fields) != 2 || fields[1].Policy(1) != `"b";q=1;w=2` {
		t.Fatalf("BuildMulti: %v", errs)
	}
	checked := 0
	check := func(i int, where string, l any) []error {
		if !strings.Contains(where, fmt.Sprintf("policy %d ", i)) {
			t.Errorf("check of policy %d named %q", i, where)
		}
		checked++
		if l == any(e) {
			return []error{errors.New(where + "checked")}
		}
		return nil
	}
	var specs []PolicySpec
	for i := range MaxPolicies + 1 {
		specs = append(specs, PolicySpec{Name: string(rune('a' + i)), Limiter: r})
	}
	for _, c := range []struct {
		name  string
		specs []PolicySpec
		check func(int, string, any) []error
		want  []string
	}{
		{"none", nil, nil, []string{"httplimit: NewMulti: 0 policies, want 1 … 8"}},
		{"too many", specs, nil, []string{"9 policies, want 1 … 8"}},
		{"a name twice", []PolicySpec{{Name: "a", Limiter: r}, {Name: "a", Limiter: r}}, nil, []string{`NewMulti policy 1 ("a"): the name is given twice`}},
		{"not a limiter", []PolicySpec{{Name: "a", Limiter: 3}}, nil, []string{`httplimit: NewMulti policy 0 ("a"): int is not a limiter`}},
		{"key error", []PolicySpec{{Name: "a", Limiter: e, KeyErr: errors.New("httplimit: KeyByHeader name is empty")}}, nil, []string{`httplimit: NewMulti policy 0 ("a"): KeyByHeader name is empty`}},
		{"bad window", []PolicySpec{{Name: "a", Limiter: e, Window: 5 * time.Second}}, nil, []string{`httplimit: NewMulti policy 0 ("a"): WithPolicyName window = 5s, but the limiter's`}},
		{"the caller's check", []PolicySpec{{Name: "a", Limiter: e}, {Name: "b", Limiter: r}}, check, []string{`NewMulti policy 0 ("a"): checked`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, f, errs := BuildMulti("httplimit: ", "NewMulti", c.specs, c.check)
			if m != nil || f != nil || len(errs) != len(c.want) {
				t.Fatalf("got %d errors %v, want %q", len(errs), errs, c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want %q", i, errs[i], w)
				}
			}
		})
	}
	if checked != 2 {
		t.Errorf("check ran %d times, want once per policy (2)", checked)
	}
}

// ones is n costs of 1.
func ones(n int) []int64 {
	ns := make([]int64, n)
	for i := range ns {
		ns[i] = 1
	}
	return ns
}
