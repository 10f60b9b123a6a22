package redisrate

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis starts redis-server on a free loopback port with a temporary
// directory, waits for PING, and stops it in Cleanup. Without redis-server
// the benchmark is skipped with the install command (it is a measurement,
// not a check; redisstore's own tests fail instead).
func startRedis(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		// go test prints a benchmark's skip only with -v: say it on stderr too.
		const msg = "SKIPPED: redis-server is not installed; BenchmarkVsRedisRate needs a real Redis (Debian: apt-get install -y redis-server)"
		fmt.Fprintln(os.Stderr, msg)
		tb.Skip(msg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", tb.TempDir(), "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	// Waiting for the server to listen is not a verdict: the deadline only
	// stops a benchmark whose server never came up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s did not answer PING: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
