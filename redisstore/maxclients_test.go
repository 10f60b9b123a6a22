package redisstore

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// fillClients opens raw connections to s until Redis refuses one with
// "max number of clients reached", and returns the accepted ones.
func fillClients(t *testing.T, s *redistest.Server) (conns []net.Conn) {
	t.Helper()
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < 10000; i++ {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "PING\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("hog %d: %v", i, err)
		}
		if line != "+PONG\r\n" {
			c.Close()
			return conns
		}
		conns = append(conns, c)
	}
	t.Fatal("Redis never refused a connection")
	return nil
}

// Redis at maxclients (another application takes every connection slot
// Redis frees) still answers every connection the limiter has open, and
// the admin's: it is not down. docs/design.md §10 promises that the policy
// decides only on a proof of Redis's failure (an error reply, a refused
// connection) or a confirmed silence, and WithBreaker that the breaker
// "opens on Redis's failure, never on the process's own delay". Here the
// limiter's connections are killed one at a time (CLIENT KILL ID), and a
// hog takes each freed slot at once: every new connection the limiter
// dials, its checker's included, is answered "-ERR max number of clients
// reached", while Redis answers every command sent on an open connection.
// minOpen: the limiter keeps at least this many open connections. With 1
// (every connection of the limiter killed, none can be made) the breaker
// opens on "write: broken pipe" and FailOpen admits: the limiter then has
// no way to reach Redis, which is arguably an outage for it.
var minOpen = 2

// warmPool makes c's pool hold n connections, each used once.
func warmPool(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cn := range conns {
		_ = cn.Close() // back to the pool
	}
}

func TestMaxClientsIsNoOutage(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			if hybrid {
				longOnly(t)
			}
			s := redistest.Start(t, "--maxclients", "64")
			c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // go-redis's defaults
			defer c.Close()
			opts := []Option{WithFailurePolicy(FailOpen)}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			var h hookLog
			l := fullLimiter(t, c, append(opts, h.opt())...)
			admin := client(t, s)
			adminID, err := admin.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The limiter's pool holds a few connections before the
			// flood (a starved flood may never open two), and the first
			// is killed before it: the test does not rest on the
			// killer's goroutine getting the CPU in time.
			warmPool(t, c, minOpen+2)
			fillClients(t, s)
			var kills atomic.Int64
			killOne := func() {
				list, err := admin.ClientList(ctx).Result()
				if err != nil {
					return
				}
				var ids []int64
				for _, line := range strings.Split(list, "\n") {
					var id int64
					_, _ = fmt.Sscanf(line, "id=%d", &id)
					if strings.Contains(line, "resp=3") && id != 0 && id != adminID {
						ids = append(ids, id)
					}
				}
				if len(ids) < minOpen { // leave the limiter one open connection at least
					return
				}
				if admin.Do(ctx, "CLIENT", "KILL", "ID", ids[len(ids)-1]).Err() == nil {
					kills.Add(1)
					fillClients(t, s)
				}
			}
			if killOne(); kills.Load() == 0 {
				t.Fatal("precondition: no connection of the limiter's to kill before the flood")
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					killOne()
				}
			}()
			ft := flood(l, "k", false, 2*time.Second)
			close(stop)
			<-done
			st := l.Stats()
			ps := c.PoolStats()
			t.Logf("%d limiter connections killed; %s; the client's pool at the end: %d connections, %d idle, %d removed", kills.Load(), report(ft, st), ps.TotalConns, ps.IdleConns, ps.StaleConns)
			for i, err := range h.all() {
				if i < 5 {
					t.Logf("OnError: %v", err)
				}
			}
			if st.BreakerOpens != 0 && ps.IdleConns == 0 {
				// The kills leave Redis with a connection of the client's,
				// but on a starved machine go-redis itself drops pooled
				// connections (a round trip that ran past its callers'
				// deadline), and at maxclients none can be made: the
				// limiter has no connection left to reach Redis, which is
				// minOpen = 1's case, an outage for it (seen beside two
				// CPU hogs in 2 of about 145 runs).
				t.Skipf("the client's pool lost every connection (premise broken, not a verdict): %+v", *ps)
			}
			if ft.admitted.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
				t.Errorf("Redis answered throughout (its client table full), yet: %d admitted past the limit, BreakerOpens %d, FallbackDecisions %d", ft.admitted.Load(), st.BreakerOpens, st.FallbackDecisions)
			}
		})
	}
}

// The same Redis at maxclients, once the traffic has stopped: a round trip
// lost (one suspicion) and no other round trip to show that Redis
// answers. The checker cannot keep a connection (Redis resets each new
// one), but the client's pool holds one that Redis answers on: the
// confirmation must find Redis answering, through it. Before, it found "no
// reply from Redis for 5s" and opened the breaker, and FailOpen admitted
// the callers waiting for the verdict (TestMaxClientsIsNoOutage's 16
// admitted past the limit on a loaded machine, where its callers with
// deadlines had all gone).
func TestMaxClientsConfirmationUsesOpenConnections(t *testing.T) {
	s := redistest.Start(t, "--maxclients", "16")
	c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // go-redis's defaults
	defer c.Close()
	l := fullLimiter(t, c, WithFailurePolicy(FailOpen)) // its pool keeps the connection it filled the key on
	fillClients(t, s)
	if err := l.checkerFor("", c).c.Ping(ctx).Err(); !lostConn(err) {
		t.Fatalf("precondition: the checker's connection at maxclients: %v, want it reset", err)
	}
	down, ok := l.judge(ctx, "k", io.EOF).wait(nil)
	if !ok || down != nil {
		t.Fatalf("the confirmation of a lost round trip, Redis answering on the pool's connection: %v", down)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("the next decision: %+v %v, want Redis's refusal (the key is full)", d, err)
	}
	if st := l.Stats(); st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}
