package redisrate

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// startRedis starts a redis-server for the benchmark (redistest: loopback,
// stopped at the end) and returns its address. Without redis-server the
// benchmark is skipped, or fails with RINGLIMIT_REQUIRE_REDIS=1.
func startRedis(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		// go test prints a benchmark's skip only with -v: say it on stderr too.
		fmt.Fprintln(os.Stderr, "SKIPPED: redis-server is not installed; BenchmarkVsRedisRate needs a real Redis (Debian: apt-get install -y redis-server)")
	}
	return redistest.Start(tb).Addr()
}
