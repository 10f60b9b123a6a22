package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A client's own cancel buys no admission: real HTTP clients against a
// real loopback server, the middleware over a redisstore limiter with
// FailOpen (so a policy answer would admit), every request cancelled by
// its client 0–400 µs after it starts. Whatever the machine's speed, the
// handler may run at most Limit times: every run is a unit Redis counted.
// Before, a request whose client had gone when Redis had not answered yet
// was the failure policy's, admitted uncounted: 2,147 handler runs in 3 s
// from 64 such clients at a limit of 5.
func TestCancellingClientsBuyNoAdmissions(t *testing.T) {
	s := redistest.Start(t)
	rdb := newRedisClient(s.Addr())
	defer rdb.Close()
	const limit = 5
	rl, err := redisstore.New(rdb, engine.Config{Limit: limit, Window: time.Minute, Algorithm: engine.SlidingWindowStrict},
		redisstore.WithFailurePolicy(redisstore.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	var runs atomic.Int64
	h := httplimit.New(rl)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		_, _ = io.WriteString(w, "ok\n")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	const clients, requests = 64, 40
	var sent, answered atomic.Int64
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for j := range requests {
				cx, cancel := context.WithCancel(context.Background())
				tm := time.AfterFunc(time.Duration((g*131+j*37)%401)*time.Microsecond, cancel)
				req, _ := http.NewRequestWithContext(cx, "GET", srv.URL+"/", nil)
				sent.Add(1)
				if resp, err := c.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answered.Add(1)
				}
				tm.Stop()
				cancel()
			}
		})
	}
	wg.Wait()
	srv.Close() // waits for every handler to return
	st := rl.Stats()
	t.Logf("%d requests (%d answered before their cancel): handler runs %d, limit %d; redisstore %+v", sent.Load(), answered.Load(), runs.Load(), limit, st)
	if runs.Load() > limit {
		t.Errorf("the handler ran %d times, the limit is %d: cancelled requests bought admissions", runs.Load(), limit)
	}
}
