package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// replicate makes s a replica of primary and waits until the link is up
// and the initial sync done.
func replicate(t *testing.T, s, primary *redistest.Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	host, port, _ := net.SplitHostPort(primary.Addr())
	if err := c.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s did not sync from %s: %v\n%s", s.Addr(), primary.Addr(), err, info)
		}
	}
}

// A failover: decisions recorded on the primary reach the replica (the
// script replicates its effects; WAIT confirms it); the replica is
// promoted and the old primary demoted to its replica; the client's
// address moves to the new primary (as a DNS name or a virtual IP would).
// The limiter's next decision meets the demoted node (READONLY: the script
// writes), which opens the breaker; the probe reaches the new primary,
// whose script cache is empty (SCRIPT FLUSH makes sure of it), recovers
// through NOSCRIPT, and closes the breaker; the counts survived: the key
// admits exactly what the limit leaves.
func TestFailover(t *testing.T) {
	oldP, newP := redistest.Start(t, "--repl-diskless-sync-delay", "0"), redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replicate(t, newP, oldP)
	var target atomic.Pointer[string]
	addr := oldP.Addr()
	target.Store(&addr)
	c := redis.NewClient(&redis.Options{
		Addr: "limits.internal:6379", MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *target.Load())
		},
	})
	defer c.Close()
	const limit = 10
	l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, withManual())
	for i := range 6 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("decision %d on the primary: %+v %v", i, d, err)
		}
	}
	pc, rc := client(t, oldP), client(t, newP)
	if n, err := pc.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d %v", n, err)
	}
	if got := storedUnits(t, rc, l, "k"); got != 6 {
		t.Fatalf("the replica holds %d units, want 6", got)
	}
	sha := script.Hash()
	onReplica, err := rc.ScriptExists(ctx, sha).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the script in the replica's cache before the failover: %v (effects replication does not send it)", onReplica[0])

	// The failover.
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	replicate(t, oldP, newP)
	if err := rc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	addr2 := newP.Addr()
	target.Store(&addr2)

	// The pooled connection still reaches the demoted node.
	before := l.Stats()
	d, err := l.AllowN(ctx, "k", 1)
	if !errors.Is(err, ErrUnavailable) || d.Allowed || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("on the demoted node: %+v %v", d, err)
	}
	if st := l.Stats(); st.BreakerOpens != before.BreakerOpens+1 || l.br.err() == nil {
		t.Fatalf("READONLY did not open the breaker: %+v", st)
	}
	// Each probe that meets another pooled connection to the demoted node
	// (New's maxmemory-policy check may have opened one) gets READONLY,
	// and go-redis drops that connection; the pool holds at most two here.
	for i := 0; !l.br.probeOnce(); i++ {
		if i == 2 {
			t.Fatalf("the probe did not reach the new primary: %v", l.br.err())
		}
	}
	if st := l.Stats(); st.NoScript != before.NoScript+1 {
		t.Fatalf("no NOSCRIPT on the new primary: %+v", st)
	}
	for i := range 6 {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil || d.Allowed != (i < limit-6) {
			t.Fatalf("decision %d after the failover: %+v %v (the counts did not survive)", i, d, err)
		}
	}
	if got := storedUnits(t, rc, l, "k"); got != limit {
		t.Fatalf("the new primary holds %d units, want %d", got, limit)
	}
}
