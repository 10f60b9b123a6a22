package engine_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Five failed logins a minute per user; a successful login forgives them.
func ExampleEngine_Reset() {
	e, _ := engine.New(engine.Config{Limit: 5, Window: time.Minute})
	defer e.Close()
	t := time.Unix(1_700_000_000, 0)
	for i := 0; i < 5; i++ {
		e.AllowAt("login:alice", 1, t) // a failed attempt
	}
	fmt.Println(e.AllowAt("login:alice", 0, t).Remaining, "attempts left")
	fmt.Println(e.Reset("login:alice")) // the password was right
	fmt.Println(e.AllowAt("login:alice", 0, t).Remaining, "attempts left")
	fmt.Println(e.Reset("login:bob")) // nothing held: nothing to forget
	// Output:
	// 0 attempts left
	// true
	// 5 attempts left
	// false
}
