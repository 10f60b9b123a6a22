package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The servers the tool starts itself: one redis-server, or a Cluster.

// persistence, with extra arguments, and returns its address and a stop
// function.
func startServer(extra ...string) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (Debian: apt-get install redis-server), or give -redis: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "redisscale")
	if err != nil {
		return "", nil, err
	}
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
	addr := net.JoinHostPort("127.0.0.1", port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := waitFor(addr+" answering", func() bool { return c.Ping(context.Background()).Err() == nil }); err != nil {
		stop()
		return "", nil, err
	}
	return addr, stop, nil
}

// startCluster starts n cluster-enabled masters (n ≥ 3), joins them with
// redis-cli --cluster create, and returns their addresses once each
// reports cluster_state:ok, and a stop function.
func startCluster(n int) ([]string, func(), error) {
	var addrs []string
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	for range n {
		a, f, err := startServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			stop()
			return nil, nil, err
		}
		addrs, stops = append(addrs, a), append(stops, f)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		stop()
		return nil, nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		err := waitFor("cluster_state:ok on "+a, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = c.Close()
		if err != nil {
			stop()
			return nil, nil, err
		}
	}
	return addrs, stop, nil
}

// waitFor polls ok for up to 10 s (a server starting: not a verdict).
func waitFor(what string, ok func() bool) error {
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
