package redisstore

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Ping proves that Redis can decide, which a PING does not: on a healthy
// server it succeeds and writes only its probe key; against a closed port
// it fails with the refused connection; on a replica (READONLY) and on a
// full server with noeviction (OOM), both of which answer PING, it fails
// naming the reply. It counts in no Stats field (but NoScript) and calls no
// OnError hook.
// (Before, New against a closed port returned a Limiter and nothing said
// so until the first request.)
func TestPing(t *testing.T) {
	var hook hookCounter
	cfg := engine.Config{Limit: 10, Window: time.Minute}

	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, cfg, hook.opt())
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("healthy server: %v", err)
	}
	if got := storedUnits(t, c, l, ""); got != 0 {
		t.Fatalf("Ping counted %d units for the user key \"\"", got)
	}
	if n, err := c.Exists(ctx, l.probeName("")).Result(); err != nil || n != 1 {
		t.Fatalf("the probe key: %d %v", n, err)
	}

	dead := mustNew(t, deadClient(t), cfg, hook.opt())
	err := dead.Ping(ctx)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("closed port: %v", err)
	}

	_, replica := redistest.StartReplicaPair(t)
	rc := client(t, replica)
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("the replica answers PING: %v", err)
	}
	ro := mustNew(t, rc, cfg, hook.opt())
	if err := ro.Ping(ctx); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("replica: %v", err)
	}

	full := redistest.Start(t, "--maxmemory-policy", "noeviction")
	fc := client(t, full)
	if err := fc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := fc.Ping(ctx).Err(); err != nil {
		t.Fatalf("the full server answers PING: %v", err)
	}
	oom := mustNew(t, fc, cfg, hook.opt())
	if err := oom.Ping(ctx); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("full server: %v", err)
	}

	for _, lim := range []*Limiter{l, dead, ro, oom} {
		if st := lim.Stats(); st != (Stats{NoScript: st.NoScript}) {
			t.Errorf("Ping counted in Stats: %+v", st)
		}
	}
	if n := hook.n.Load(); n != 0 {
		t.Errorf("Ping called OnError %d times", n)
	}
}

// With a ClusterClient, Ping probes every master: on a healthy cluster it
// succeeds; with one master killed it fails, naming that master.
func TestPingCluster(t *testing.T) {
	t.Parallel() // waits mostly on cluster set-up
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Limit: 10, Window: time.Minute})
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("healthy cluster: %v", err)
	}
	for _, n := range nodes {
		if keys, err := n.Client().Keys(ctx, "*:probe").Result(); err != nil || len(keys) != 1 {
			t.Fatalf("master %s holds the probe keys %v (%v), want one: every master is probed once", n.Addr(), keys, err)
		}
	}
	nodes[1].Kill()
	err := l.Ping(ctx)
	if err == nil || !strings.Contains(err.Error(), nodes[1].Addr()) {
		t.Fatalf("a master killed: %v, want an error naming %s", err, nodes[1].Addr())
	}
	for _, n := range []*redistest.Server{nodes[0], nodes[2]} {
		if strings.Contains(err.Error(), n.Addr()+":") {
			t.Errorf("a healthy master named: %v", err)
		}
	}
}

// With a Ring, Ping probes every shard, and names the one that fails. (Before,
// it probed the shard of one key and returned nil with another shard dead.)
func TestPingRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer ring.Close()
	l := mustNew(t, ring, engine.Config{Limit: 10, Window: time.Minute})
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("healthy ring: %v", err)
	}
	for _, s := range []*redistest.Server{a, b} {
		if n, err := s.Client().Exists(ctx, l.probeName("")).Result(); err != nil || n != 1 {
			t.Fatalf("shard %s holds no probe key (%d, %v): every shard is probed", s.Addr(), n, err)
		}
	}
	// Kill the shard that the probe key of "" is not routed to.
	c, err := ring.GetShardClientForKey(l.probeName(""))
	if err != nil {
		t.Fatal(err)
	}
	dead, live := a, b
	if c.Options().Addr == a.Addr() {
		dead, live = b, a
	}
	dead.Kill()
	err = l.Ping(ctx)
	if err == nil || !strings.Contains(err.Error(), dead.Addr()) {
		t.Fatalf("a shard killed: %v, want an error naming %s", err, dead.Addr())
	}
	if strings.Contains(err.Error(), live.Addr()) {
		t.Errorf("the healthy shard named: %v", err)
	}
}
