package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// "Bad input gets clear errors at New": the microsecond error ends mid-sentence.
func TestReview4MicrosecondErrorMessage(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	_, err := New(c, engine.Config{Limit: 1, Window: 10 * time.Microsecond, SubWindows: 4})
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	t.Logf("%s", msg)
	if strings.HasSuffix(strings.TrimSpace(msg), " is") {
		t.Errorf("error message is cut off mid-sentence: %q", msg)
	}
}

// Policy answers: FailClosed RetryAfter is one sub-window (the window for
// FixedWindow); FailOpen admits; both with ErrUnavailable.
func TestReview4PolicyAnswers(t *testing.T) {
	s := redistest.Start(t)
	fc, _ := New(client(t, s), engine.Config{Limit: 10, Window: 3 * time.Second, Algorithm: engine.FixedWindow})
	fo, _ := New(client(t, s), engine.Config{Limit: 10, Window: 3 * time.Second, SubWindows: 3}, WithPolicy(FailOpen))
	defer fc.Close()
	defer fo.Close()
	s.Kill()
	for i := range 3 {
		d, err := fc.AllowN(context.Background(), "k", 1)
		if !errors.Is(err, ErrUnavailable) || d.Allowed || d.RetryAfter != 3*time.Second || d.Remaining != 0 {
			t.Errorf("FailClosed #%d: %+v %v", i, d, err)
		}
		d, err = fo.AllowN(context.Background(), "k", 1)
		if !errors.Is(err, ErrUnavailable) || !d.Allowed {
			t.Errorf("FailOpen #%d: %+v %v", i, d, err)
		}
	}
}
