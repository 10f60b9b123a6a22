package redistest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// These tests kill servers on purpose: no dial errors in the log.
func init() { redistest.QuietClientLogs() }

func TestStandaloneServesAndRestartsEmpty(t *testing.T) {
	t.Parallel() // waits mostly on server start-up
	s := redistest.Start(t, "--maxmemory-policy", "noeviction")
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	if got := c.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]; got != "noeviction" {
		t.Fatalf("maxmemory-policy = %q: the extra arguments were not passed", got)
	}
	if host := s.Addr(); !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want loopback", host)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Start()
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET k after a restart = %v, want redis.Nil (nothing is persisted)", err)
	}
}

func TestReplicaPairReplicatesAndPromotes(t *testing.T) {
	t.Parallel() // waits mostly on cluster or replica set-up
	p, r := redistest.StartReplicaPair(t)
	ctx := context.Background()
	pc, rc := p.Client(), r.Client()
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := pc.Do(ctx, "WAIT", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := rc.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("replica GET k = %q, want v", got)
	}
	if err := rc.Set(ctx, "x", "y", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("write to the replica = %v, want READONLY", err)
	}
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, "x", "y", 0).Err(); err != nil {
		t.Fatalf("write after promotion: %v", err)
	}
}

func TestClusterCoversEverySlot(t *testing.T) {
	t.Parallel() // waits mostly on cluster or replica set-up
	nodes := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	masters := map[string]bool{}
	for i := range 64 {
		k := fmt.Sprintf("{tenant-%d}", i)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		slot := c.ClusterKeySlot(ctx, k).Val()
		shards, err := c.ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if slot >= r.Start && slot <= r.End {
					masters[sh.Nodes[0].ID] = true
				}
			}
		}
	}
	if len(masters) != 3 {
		t.Fatalf("64 keys landed on %d masters, want 3", len(masters))
	}
}

// TestMissingServerSkipsOrFails runs this test binary again with an empty
// PATH, once plainly (the test must skip) and once with
// RINGLIMIT_REQUIRE_REDIS=1 (it must fail).
func TestMissingServerSkipsOrFails(t *testing.T) {
	t.Parallel() // waits on its two child processes
	if os.Getenv("REDISTEST_CHILD") == "1" {
		redistest.Start(t)
		t.Fatal("Start returned without a redis-server on PATH")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(require string) (string, error) {
		cmd := exec.Command(exe, "-test.run", "^TestMissingServerSkipsOrFails$", "-test.v")
		cmd.Env = []string{"PATH=/nonexistent", "REDISTEST_CHILD=1", redistest.RequireEnv + "=" + require}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "apt-get install -y redis-server") {
		t.Fatalf("without %s: err %v, want a skip naming the package:\n%s", redistest.RequireEnv, err, out)
	}
	out, err = run("1")
	if err == nil || !strings.Contains(out, "--- FAIL") {
		t.Fatalf("with %s=1: err %v, want a failure:\n%s", redistest.RequireEnv, err, out)
	}
}
