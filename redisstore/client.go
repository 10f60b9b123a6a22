package redisstore

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrUnboundedRoundTrip is passed to the OnError hook by New when the
// client's options let a round trip to a stalled server last forever (see
// New).
var ErrUnboundedRoundTrip = errors.New("redisstore: warning: the client has no read deadline (ReadTimeout -1 without ContextTimeoutEnabled, or ReadTimeout -2, which sets none even from the context), so a round trip to a stalled server never ends: decisions still return by their callers' deadlines, but the round trip holds a sender and a connection, and Close waits for it")

// contextTimeouts reports whether client enforces context deadlines on
// its reads: ContextTimeoutEnabled, and a ReadTimeout other than −2, with
// which go-redis sets no read deadline at all (Options() is normalised:
// −2 is −1 there, −1 is 0).
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0
	case *redis.ClusterClient:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0
	}
	return false
}

// unboundedReads reports whether client's options let a read wait forever.
func unboundedReads(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client: // normalised: ReadTimeout 0 (−1 given) is no read deadline but the context's, −1 (−2 given) none at all
		o := c.Options()
		return o.ReadTimeout < 0 || o.ReadTimeout == 0 && !o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		return o.ReadTimeout < 0 || o.ReadTimeout == 0 && !o.ContextTimeoutEnabled
	}
	return false
}

// The confirmation's connections (liveness.go). A round trip that got no
// reply raises a suspicion, and the confirmation that judges it must not
// wait where the failed call waited: in the client's pool, which the
// application may hold (BLPOP, Conn(), a pool of 2 under load), or behind
// the limiter's own round trips. So each node (the *redis.Client, each
// master of a ClusterClient, each shard of a Ring) gets a checker: a
// client of its own, made from the node's options (address, dialer, TLS,
// credentials, database, OnConnect), with one connection, no retries, and
// context deadlines enforced. It is made at the node's first suspicion and
// closed by Close, which ends its dials first (checkdial.go). A client of
// any other type has none: its checks share its pool.

// defaultLive is the longest reply treated as alive when the client sets
// no read deadline: go-redis's default ReadTimeout.
const defaultLive = 5 * time.Second

// liveBudget is how long, in the process's own time, Redis may leave the
// confirmation's check unanswered before the silence is an outage: the
// client's ReadTimeout, which go-redis applies to every reply, and at
// least confirmBudget; defaultLive when it sets none.
func liveBudget(client redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch c := client.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	case *redis.Ring:
		rt = c.Options().ReadTimeout
	default:
		return defaultLive
	}
	if rt <= 0 { // normalised: none, or the default
		rt = defaultLive
	}
	return max(rt, confirmBudget)
}

// node is the Redis server that serves key: its address ("" with a client
// of one server, or when the client cannot say) and its client (nil when
// unknown: the checks then go through l.client).
func (l *Limiter) node(ctx context.Context, key string) (string, *redis.Client) {
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		if n, err := c.MasterForKey(ctx, l.Key(key)); err == nil {
			return n.Options().Addr, n
		}
	case *redis.Ring:
		if n, err := c.GetShardClientForKey(l.Key(key)); err == nil {
			return n.Options().Addr, n
		}
	case *redis.Client:
		return "", c
	}
	return "", nil
}

// multiNode reports whether client spreads keys over several servers, each
// with a failure state of its own.
func multiNode(client redis.UniversalClient) bool {
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// checker is one node's client for confirmations, whose connections judge
// a check's silence themselves (checkconn.go).
type checker struct {
	c       *redis.Client
	dialing atomic.Int64 // dials in progress (checkdial.go)
}

// checkerFor returns the checker of node (address addr), made at its
// first use; nil if node is nil or after Close.
func (l *Limiter) checkerFor(addr string, node *redis.Client) *checker {
	if node == nil {
		return nil
	}
	if v, ok := l.checkers.Load(addr); ok {
		return v.(*checker)
	}
	l.nodeMu.Lock()
	defer l.nodeMu.Unlock()
	if l.closed.Load() {
		return nil // Close closes every checker made before it, under nodeMu
	}
	if v, ok := l.checkers.Load(addr); ok {
		return v.(*checker)
	}
	ck := &checker{}
	o := *node.Options()
	// One check at a time, so one connection; PoolSize is go-redis's count
	// of failed dials before it stops dialing for a second or more.
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 64, 0, 1, 0
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	o.ReadTimeout, o.WriteTimeout = 2*l.live, 2*l.live // ignored by its connections, which keep their own (checkconn.go)
	o.PoolTimeout = 2 * l.live
	if o.Dialer == nil { // Options() is normalised: set already
		o.Dialer = redis.NewDialer(node.Options())
	}
	// The retries are the dialer's, which Close ends (checkdial.go).
	o.Dialer, o.DialerRetries = l.checkDialer(ck, &o), 1
	// The node's own config is the client's, which go-redis writes under
	// a lock of its own: the checker needs none.
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// Nothing shared with the node's client or cached: a check must reach
	// Redis.
	o.PushNotificationProcessor = nil
	o.ClientSideCacheConfig, o.ClientSideCache = nil, nil
	o.Limiter = nil
	ck.c = redis.NewClient(&o)
	l.checkers.Store(addr, ck)
	return ck
}

// closeCheckers closes the checkers (Close, after the breakers stopped
// and l.bg was cancelled), once their dials in progress have ended
// (checkdial.go).
func (l *Limiter) closeCheckers() {
	l.nodeMu.Lock()
	l.closed.Store(true)
	l.nodeMu.Unlock()
	l.dials.Wait()
	l.checkers.Range(func(_, v any) bool {
		_ = v.(*checker).c.Close()
		return true
	})
}

// lostConn reports whether err is a connection closed under a round trip
// (by the peer: a killed connection, a server killed or restarted).
func lostConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
