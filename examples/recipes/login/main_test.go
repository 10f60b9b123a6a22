package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

func check(u, p string) bool { return u == "alice" && p == "secret" }

// loginScript runs the recipe's promise against one server: 4 failures, a
// success that forgives them, 5 more failures, then even the right
// password is refused; another user is not affected.
func loginScript(t *testing.T, url_ string) {
	t.Helper()
	post := func(u, p string) int {
		res, err := http.PostForm(url_+"/login", url.Values{"user": {u}, "password": {p}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for i := 0; i < 4; i++ {
		if code := post("alice", "wrong"); code != 401 {
			t.Fatalf("failure %d: %d", i, code)
		}
	}
	if code := post("alice", "secret"); code != 200 {
		t.Fatalf("the 5th attempt, right: %d", code)
	}
	for i := 0; i < 5; i++ { // forgiven: 5 more
		if code := post("alice", "wrong"); code != 401 {
			t.Fatalf("failure %d after the reset: %d", i, code)
		}
	}
	if code := post("alice", "secret"); code != 429 {
		t.Fatalf("the 6th attempt in a row, right: %d, want 429", code)
	}
	if code := post("bob", "wrong"); code != 401 {
		t.Fatalf("another user: %d", code)
	}
	if code := post("", "wrong"); code != 400 {
		t.Fatalf("no user: %d", code)
	}
}

func TestLoginInProcess(t *testing.T) {
	e, err := engine.New(limit)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h, err := newHandler(e, func(_ context.Context, key string) error { e.Reset(key); return nil }, check)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	loginScript(t, srv.URL)
}

// Through Redis, two replicas: the success on one forgives the failures
// counted on both.
func TestLoginThroughRedis(t *testing.T) {
	s := redistest.Start(t)
	var urls []string
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		rl, err := redisstore.New(rdb, limit)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rl.Close() })
		h, err := newHandler(rl, rl.Reset, check)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	loginScript(t, urls[0])
	// The other replica sees alice's count full, and the reset on it
	// counts for both.
	res, err := http.PostForm(urls[1]+"/login", url.Values{"user": {"alice"}, "password": {"secret"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 {
		t.Fatalf("the other replica: %d, want 429", res.StatusCode)
	}
}
