package callergone

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lateTimer is a context whose deadline is dl while its timer has not
// fired: Done is open and Err nil, as for a real context in the moment
// after its deadline.
type lateTimer struct {
	context.Context
	dl time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.dl, true }

func TestErr(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	bg := context.Background()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"no deadline", bg, nil},
		{"a deadline in an hour", live, nil},
		{"cancelled", canceled, context.Canceled},
		{"past its deadline, timer fired", expired, context.DeadlineExceeded},
		{"past its deadline, timer not fired", lateTimer{bg, time.Now().Add(-time.Millisecond)}, context.DeadlineExceeded},
		{"deadline in 1970, timer not fired", lateTimer{bg, time.Unix(1, 0)}, context.DeadlineExceeded},
		{"deadline a minute ahead, timer not fired", lateTimer{bg, time.Now().Add(time.Minute)}, nil},
		{"cancelled with a late timer", lateTimer{canceled, time.Now().Add(-time.Millisecond)}, context.Canceled},
	} {
		if got := Err(c.ctx); !errors.Is(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: Err = %v, want %v", c.name, got, c.want)
		}
	}
	// A deadline exactly at now has passed: context.WithDeadline(now) is
	// done at once. The deadline is read from the context before Err reads
	// the clock, so a deadline taken as now a moment earlier is reached.
	at := lateTimer{bg, time.Now()}
	if err := Err(at); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline at now: Err = %v, want DeadlineExceeded", err)
	}
}
