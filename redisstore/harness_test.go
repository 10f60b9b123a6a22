package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
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

// server is a redis-server started by a test on a loopback port.
type server struct {
	tb   testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// The pool logs every failed dial; the tests kill servers on purpose.
func init() { redis.SetLogger(quietLogger{}) }

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func needRedis(tb testing.TB) {
	tb.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("%s is not installed: these tests need a real Redis (Debian: apt-get install -y redis-server); .ci/run installs it", bin)
		}
	}
}

// startRedis starts redis-server on a free loopback port with a temporary
// directory, waits for PING, and stops it in Cleanup.
func startRedis(tb testing.TB, extra ...string) *server {
	tb.Helper()
	needRedis(tb)
	s := &server{tb: tb, port: freePort(tb), dir: tb.TempDir(), args: extra}
	s.start()
	tb.Cleanup(s.kill)
	return s
}

func (s *server) start() {
	s.tb.Helper()
	args := append([]string{"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no"}, debugFlag()...)
	args = append(args, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.kill()
			s.tb.Fatalf("redis-server on %s did not answer PING: %v", s.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signal sends sig to the server (SIGSTOP stalls it, SIGCONT resumes it).
func (s *server) signal(sig os.Signal) {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatal(err)
	}
}

// debugFlag allows DEBUG (DEBUG SLEEP) from loopback clients: Redis 7 needs
// --enable-debug-command, which older servers do not know (and do not need).
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

// kill stops the server (SIGKILL) and waits for it.
func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_, _ = s.cmd.Process.Wait()
		s.cmd = nil
	}
}

func (s *server) client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: s.addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
	})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// startCluster starts three cluster-enabled masters and joins them.
func startCluster(tb testing.TB) []*server {
	tb.Helper()
	var nodes []*server
	var addrs []string
	for range 3 {
		dir := tb.TempDir()
		s := startRedis(tb, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf", "--cluster-node-timeout", "5000")
		nodes = append(nodes, s)
		addrs = append(addrs, s.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.addr()})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("cluster on %v not ok: %v %s", addrs, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return nodes
}

// withManual starts a hybrid limiter with no flusher and no prober: the
// test runs them with flushNow and probeNow, so nothing happens between two
// of its steps.
func withManual() Option { return func(o *options) error { o.manual = true; return nil } }

func (l *Limiter) flushNow()      { l.hyb.flush(time.Now()) }
func (l *Limiter) probeNow() bool { return l.hyb.br.probeOnce() }

// storedUnits sums the counters Redis holds for the given user keys.
func storedUnits(tb testing.TB, c redis.UniversalClient, l *Limiter, keys ...string) int64 {
	tb.Helper()
	var total int64
	for i := 0; i < len(keys); i += 1000 {
		pipe := c.Pipeline()
		var cmds []*redis.StringCmd
		for _, k := range keys[i:min(i+1000, len(keys))] {
			cmds = append(cmds, pipe.Get(context.Background(), l.Key(k)))
		}
		if _, err := pipe.Exec(context.Background()); err != nil && err != redis.Nil {
			tb.Fatal(err)
		}
		for _, cmd := range cmds {
			if cmd.Err() == redis.Nil {
				continue
			}
			_, counts := decodeState(tb, cmd.Val(), l.span)
			for _, n := range counts {
				total += n
			}
		}
	}
	return total
}

// decodeState reads a key's packed state (see luaSource): the newest
// epoch l, and the ring of counts of epochs l−span … l, checking that the
// header's mid agrees with the ring.
func decodeState(tb testing.TB, raw string, span int) (newest int64, counts []int64) {
	tb.Helper()
	if len(raw) != 8*(span+3) {
		tb.Fatalf("state of %d bytes, want %d", len(raw), 8*(span+3))
	}
	vals := make([]int64, span+3)
	for i := range vals {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[8*i : 8*i+8])))
		if f != math.Trunc(f) || f < 0 || f >= 1<<53 {
			tb.Fatalf("state value %v is not an exact non-negative integer", f)
		}
		vals[i] = int64(f)
	}
	counts = vals[2:]
	var mid int64
	for k := 1; k < span; k++ {
		mid += counts[k]
	}
	if mid != vals[1] {
		tb.Fatalf("state: mid %d, but the ring between its ends sums to %d", vals[1], mid)
	}
	return vals[0], counts
}

// staleDeadline is a context whose deadline has passed but whose timer has
// not fired yet: Err() is still nil, as it is for a real context for a
// short while after its deadline.
type staleDeadline struct{ context.Context }

func (staleDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (staleDeadline) Err() error                  { return nil }
