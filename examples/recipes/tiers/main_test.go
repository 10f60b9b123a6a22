package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Two replicas on one redis-server hold each tier's limit between them:
// a free tenant gets 3 requests in the window, a pro tenant 5, whichever
// replica answers, and every tenant has a window of its own.
func TestTiersAcrossTwoReplicas(t *testing.T) {
	s := redistest.Start(t)
	var replicas []*httptest.Server
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		h, rl, err := newHandler(rdb, limits{Free: 3, Pro: 5, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rl.Close() })
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		replicas = append(replicas, srv)
	}
	get := func(replica int, tenant string) (int, string) {
		req, _ := http.NewRequest("GET", replicas[replica].URL, nil)
		req.Header.Set("X-Tenant", tenant)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header.Get("RateLimit-Policy")
	}
	for _, c := range []struct {
		tenant, policy string
		limit          int
	}{{"bob", `"tenant";q=3;w=60`, 3}, {"acme", `"tenant";q=5;w=60`, 5}, {"globex", `"tenant";q=5;w=60`, 5}, {"eve", `"tenant";q=3;w=60`, 3}} {
		for i := 0; i < c.limit; i++ {
			if code, policy := get(i%2, c.tenant); code != 200 || policy != c.policy {
				t.Fatalf("%s, request %d: %d %s", c.tenant, i, code, policy)
			}
		}
		for replica := range 2 {
			if code, _ := get(replica, c.tenant); code != 429 {
				t.Fatalf("%s, past its tier's limit on replica %d: %d", c.tenant, replica, code)
			}
		}
	}
	if code, _ := get(0, ""); code != 400 {
		t.Fatalf("no tenant: %d, want 400", code)
	}
}
