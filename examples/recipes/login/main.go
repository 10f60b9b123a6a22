// Command login is a recipe of docs/recipes.md: a login endpoint that
// allows 5 failed attempts per user in 15 minutes, and forgives them when
// the user logs in: a successful login resets the user's count. In process
// by default, or shared by every replica through Redis (-redis).
//
//	go run ./login                          # listens on 127.0.0.1:8080
//	go run ./login -redis 127.0.0.1:6379    # the count shared through Redis
//	curl -i -d 'user=alice&password=wrong' http://127.0.0.1:8080/login   # 401, then 429 after 5
//	curl -i -d 'user=alice&password=secret' http://127.0.0.1:8080/login  # 200, and alice's count is reset
//
// Every attempt counts, the right password included, so a guesser is
// stopped after 5 tries whatever it guesses; only a success within the
// limit resets the count.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore"
)

// user keys an attempt by the form's user name (the middleware answers 400
// when there is none).
var user = httplimit.KeyFunc(func(r *http.Request) (string, error) {
	if u := r.PostFormValue("user"); u != "" {
		return "login\x00" + u, nil
	}
	return "", errors.New("no user")
})

// resetFunc forgets a key's count: engine.Reset in process,
// redisstore.Limiter.Reset through Redis.
type resetFunc func(ctx context.Context, key string) error

// newHandler serves POST /login over limiter l (an *engine.Engine or a
// *redisstore.Limiter), resetting the user's count with reset on success.
// check says whether a user's password is right.
func newHandler(l any, reset resetFunc, check func(user, password string) bool) (http.Handler, error) {
	m, err := httplimit.NewMiddleware(l, httplimit.WithKey(user), httplimit.WithPolicyName("login", 0))
	if err != nil {
		return nil, err
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !check(r.PostFormValue("user"), r.PostFormValue("password")) {
			http.Error(w, "wrong user or password", http.StatusUnauthorized)
			return
		}
		key, _ := user.Of(r) // the key the middleware counted this attempt under
		if err := reset(r.Context(), key); err != nil {
			// Redis did not answer: the user is logged in, and the
			// failed attempts still count until they leave the window.
			log.Printf("login: %v", err)
		}
		fmt.Fprintln(w, "welcome")
	})
	mux := http.NewServeMux()
	mux.Handle("POST /login", m.Handler(login))
	return mux, nil
}

// limit is 5 failed attempts per 15 minutes.
var limit = engine.Config{Limit: 5, Window: 15 * time.Minute}

func main() {
	addr := flag.String("redis", "", "Redis address; empty: in process")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	check := func(u, p string) bool { return u == "alice" && p == "secret" } // your password check here
	var h http.Handler
	var err error
	if *addr == "" {
		e, eerr := engine.New(limit)
		if eerr != nil {
			log.Fatal(eerr)
		}
		defer e.Close()
		h, err = newHandler(e, func(_ context.Context, key string) error { e.Reset(key); return nil }, check)
	} else {
		rdb := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer rdb.Close()
		rl, rerr := redisstore.New(rdb, limit)
		if rerr != nil {
			log.Fatal(rerr)
		}
		defer rl.Close()
		h, err = newHandler(rl, rl.Reset, check)
	}
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("listening on %s", *listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
		os.Exit(1)
	}
}
