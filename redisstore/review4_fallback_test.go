package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// FallbackLocal with n above the local share but ≤ the key's limit: the
// request is admittable (by Redis, once back), so the policy answer must
// not carry RetryAfter Never (found by the fourth adversarial review).
func TestReview4FallbackNeverForAdmittable(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(client(t, s), engine.Config{Limit: 100, Window: time.Second}, WithFallbackLocal(0.25))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s.Kill()
	d, err := l.AllowN(context.Background(), "k", 50)
	t.Logf("%+v %v reason %v", d, err, d.Reason())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v", err)
	}
	if d.Allowed || d.RetryAfter != time.Second/10 {
		t.Errorf("policy answer for an admittable request (n=50 ≤ Limit 100) says %+v, want denied with RetryAfter one sub-window", d)
	}
}
