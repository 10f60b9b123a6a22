// Package redistest starts real redis-server processes on free loopback
// ports for tests, and stops them when the test ends, the way
// net/http/httptest starts HTTP servers: a standalone server, a primary
// with a replica, or a small Cluster.
//
// It finds redis-server (and, for a Cluster, redis-cli) on PATH. When they
// are missing the test is skipped with a message naming the Debian package,
// unless the environment sets RINGLIMIT_REQUIRE_REDIS=1, which makes that a
// failure (CI sets it, so that a missing install cannot pass as a skip).
//
// Servers listen on 127.0.0.1 only, persist nothing (no RDB, no AOF) and
// keep their files in the test's temporary directory.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a failure.
const RequireEnv = "RINGLIMIT_REQUIRE_REDIS"

// clientTimeout is the dial, read and write timeout of Client's clients.
// (It was 1 s, and a replica's WAIT on a loaded machine took longer.)
const clientTimeout = 10 * time.Second

// startTimeout bounds how long a server may take to answer its first PING,
// or a Cluster to report cluster_state:ok. It is a bound on a hang, never a
// verdict on speed: a slow machine only waits longer.
const startTimeout = 30 * time.Second

// Server is one redis-server process started by a test. Its methods may be
// called from the test's goroutine; Kill and Start are not safe to call
// concurrently with each other.
type Server struct {
	tb   testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// Require skips tb (or fails it, with RINGLIMIT_REQUIRE_REDIS=1) unless
// every named binary is on PATH. Start, StartReplicaPair and StartCluster
// call it; call it yourself before other set-up that needs the servers.
func Require(tb testing.TB, bins ...string) {
	tb.Helper()
	if len(bins) == 0 {
		bins = []string{"redis-server"}
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			msg := fmt.Sprintf("redistest: %s is not on PATH: this test needs a real Redis (Debian: apt-get install -y redis-server)", bin)
			if os.Getenv(RequireEnv) == "1" {
				tb.Fatal(msg + "; " + RequireEnv + "=1 makes this a failure")
			}
			tb.Skip(msg + "; set " + RequireEnv + "=1 to fail instead")
		}
	}
}

// Start starts a standalone redis-server on a free loopback port, waits
// until it answers PING, and kills it when tb's test ends. Extra arguments
// are appended to the command line (for example "--maxmemory", "48mb").
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	Require(tb, "redis-server")
	s := &Server{tb: tb, dir: tb.TempDir(), args: extra}
	s.port = freePort(tb)
	s.Start()
	tb.Cleanup(s.Kill)
	return s
}

// Addr is the server's address, 127.0.0.1:port. It stays the same across
// Kill and Start.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Start (re)starts the process on the same port and directory, and waits
// until it answers PING. It does nothing if the process is running.
func (s *Server) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		return
	}
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no"}
	args = append(args, debugFlag()...)
	args = append(args, s.args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("redistest: starting redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Kill()
			s.tb.Fatalf("redistest: redis-server on %s did not answer PING within %v: %v", s.Addr(), startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the process with SIGKILL and waits for it to exit: what a
// crash looks like to clients. Nothing is persisted, so a Start after it
// begins with an empty dataset. Kill is idempotent.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
}

// Signal sends sig to the process: syscall.SIGSTOP stalls the server
// without closing its connections, syscall.SIGCONT resumes it.
func (s *Server) Signal(sig os.Signal) {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: Signal(%v) on a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: Signal(%v): %v", sig, err)
	}
}

// Client returns a client of the server with go-redis retries off, closed
// when the test ends. Its timeouts (10 s) are bounds on a hang,
// never a verdict on speed: a healthy server on a loaded machine is never
// given up on. A killed server still fails its calls at once (the
// connection is refused).
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: clientTimeout, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout,
	})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// StartReplicaPair starts a primary and a replica of it, and returns once
// the replica reports its link up. Promote the replica with
// `REPLICAOF NO ONE` on its client.
func StartReplicaPair(tb testing.TB) (primary, replica *Server) {
	tb.Helper()
	primary = Start(tb)
	replica = Start(tb, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	c := replica.Client()
	waitFor(tb, "replica link up", func() (bool, string) {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), info
	})
	return primary, replica
}

// StartCluster starts n cluster-enabled masters (n ≥ 3, Redis's minimum),
// joins them with redis-cli --cluster create, and returns once every node
// reports cluster_state:ok. Clients reach it with redis.NewClusterClient
// and Addrs(nodes).
func StartCluster(tb testing.TB, n int) []*Server {
	tb.Helper()
	if n < 3 {
		tb.Fatalf("redistest: StartCluster(%d): a Redis Cluster needs at least 3 masters", n)
	}
	Require(tb, "redis-server", "redis-cli")
	nodes := make([]*Server, n)
	for i := range nodes {
		conf := tb.TempDir() + "/nodes.conf"
		nodes[i] = Start(tb, "--cluster-enabled", "yes", "--cluster-config-file", conf, "--cluster-node-timeout", "5000")
	}
	args := append([]string{"--cluster", "create"}, Addrs(nodes)...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range nodes {
		c := s.Client()
		waitFor(tb, "cluster_state:ok on "+s.Addr(), func() (bool, string) {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok"), info
		})
	}
	return nodes
}

// QuietClientLogs silences go-redis's package logger, which logs every
// failed dial: a test that kills or stalls its servers on purpose calls it
// once (from an init func, say). It sets a process-wide logger.
func QuietClientLogs() { redis.SetLogger(quietLogger{}) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Addrs lists the servers' addresses.
func Addrs(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

func waitFor(tb testing.TB, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: no %s within %v; last state:\n%s", what, startTimeout, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// debugFlag allows DEBUG (DEBUG SLEEP) from loopback clients: Redis 7
// needs --enable-debug-command, which older servers do not know.
var debugFlag = sync.OnceValue(func() []string {
	out, _ := exec.Command("redis-server", "--version").Output()
	if _, v, ok := strings.Cut(string(out), " v="); ok {
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n >= 7 {
			return []string{"--enable-debug-command", "local"}
		}
	}
	return nil
})
