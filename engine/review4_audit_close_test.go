package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Close racing with decisions and Audit calls; every decision accounted for
// (Decisions + Dropped), and the report stays consistent.
func TestReview4AuditCloseRace(t *testing.T) {
	for round := 0; round < 5; round++ {
		e, err := engine.New(engine.Config{Limit: 1 << 20, Window: time.Second, Audit: 1, AuditBuffer: 64})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		const per = 3000
		for w := range 3 {
			wg.Go(func() {
				for i := range per {
					e.AllowN(fmt.Sprint("k", (i+w)%4), 1)
				}
			})
		}
		wg.Go(func() {
			for range 50 {
				r := e.Audit()
				if r.Decisions != r.Admits+r.Denies || r.Decisions != r.Judged+r.Unjudged {
					t.Errorf("inconsistent %+v", r)
				}
			}
		})
		wg.Go(func() { time.Sleep(time.Millisecond); e.Close() })
		wg.Wait()
		r := e.Audit()
		if r.Decisions+r.Dropped != 3*per {
			t.Errorf("decisions %d + dropped %d != %d", r.Decisions, r.Dropped, 3*per)
		}
		advConsistent(t, r)
		if r.FalseAdmits != 0 || r.FalseDenies != 0 {
			t.Errorf("%+v", r)
		}
	}
}
