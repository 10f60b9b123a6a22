package adapter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// remoteStub is a ContextLimiter that answers d and err.
type remoteStub struct {
	d   engine.Decision
	err error
	got []string // keys asked, in order
}

func (r *remoteStub) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	r.got = append(r.got, key)
	return r.d, r.err
}

func newTestEngine(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestNewBackendAcceptsBothShapesAndNamesAnythingElse(t *testing.T) {
	e := newTestEngine(t, engine.Config{Limit: 2, Window: time.Second})
	b, err := NewBackend(e)
	if err != nil || b.Engine() != e {
		t.Fatalf("engine: %v, Engine() = %p", err, b.Engine())
	}
	if d, err := b.AllowN(context.Background(), "k", 1); err != nil || !d.Allowed {
		t.Fatalf("engine AllowN: %+v %v", d, err)
	}
	r := &remoteStub{d: engine.Decision{Allowed: true, Limit: 3, Remaining: 2}}
	b, err = NewBackend(r)
	if err != nil || b.Engine() != nil {
		t.Fatalf("remote: %v, Engine() = %p", err, b.Engine())
	}
	if d, err := b.AllowN(context.Background(), "k", 1); err != nil || d != r.d {
		t.Fatalf("remote AllowN: %+v %v", d, err)
	}
	for _, c := range []struct {
		l    any
		want string
	}{
		{nil, "nil limiter (<nil>)"},
		{(*engine.Engine)(nil), "nil limiter (*engine.Engine)"},
		{(*remoteStub)(nil), "nil limiter (*adapter.remoteStub)"},
		{42, "int is not a limiter; want AllowN(key string, n int64)"},
	} {
		if _, err := NewBackend(c.l); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewBackend(%T): %v, want %q", c.l, err, c.want)
		}
	}
}

// CallerGone judges a failed decision by callergone: a context that ended,
// or whose deadline passed before its timer fired (Err still nil), is a
// caller who has gone; a live context, or no failure, is not.
func TestCallerGoneOnlyForAFailureAfterTheContextEnded(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	late := adaptertest.LateTimer(live)
	fail := errors.New("backend down")
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want error
	}{
		{live, nil, nil}, {live, fail, nil}, {done, nil, nil}, {done, fail, context.Canceled},
		{late, nil, nil}, {late, fail, context.DeadlineExceeded},
	} {
		if got := CallerGone(c.ctx, c.err); got != c.want {
			t.Errorf("CallerGone(ctx err %v, %v) = %v, want %v", c.ctx.Err(), c.err, got, c.want)
		}
	}
}

func TestConfigErrorKeepsOnePrefix(t *testing.T) {
	inner := errors.New("httplimit: KeyByHeader name is empty")
	err := &ConfigError{Prefix: "httplimit: ", Where: "NewMulti policy 0 (\"a\")", Err: inner}
	if got, want := err.Error(), `httplimit: NewMulti policy 0 ("a"): KeyByHeader name is empty`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, inner) {
		t.Error("ConfigError does not unwrap to its Err")
	}
}

type testConf struct{ limit int }

type testOpt func(*testConf) error

func TestApplyOptionsRunsInOrderAndNamesNilOnes(t *testing.T) {
	var c testConf
	bad := errors.New("bad option")
	errs := ApplyOptions("p: ", "New", &c, []testOpt{
		func(c *testConf) error { c.limit = 1; return nil },
		nil,
		func(c *testConf) error { c.limit *= 10; return bad },
	})
	if c.limit != 10 {
		t.Errorf("limit = %d, want 10 (options in order)", c.limit)
	}
	if len(errs) != 2 || errs[0].Error() != "p: New: option 1 is nil" || errs[1] != bad {
		t.Errorf("errors %v", errs)
	}
	if errs := ApplyOptions[testConf, testOpt]("p: ", "New", &c, nil); errs != nil {
		t.Errorf("no options: %v", errs)
	}
}

func TestCountersLoad(t *testing.T) {
	var c Counters
	c.Allowed.Add(1)
	c.Denied.Add(2)
	c.Rejected.Add(3)
	c.Errors.Add(4)
	c.Canceled.Add(5)
	c.WouldDeny.Add(6)
	c.SettleErrors.Add(7)
	if got, want := c.Load(), (Counts{1, 2, 3, 4, 5, 6, 7}); got != want {
		t.Errorf("Load() = %+v, want %+v", got, want)
	}
}
