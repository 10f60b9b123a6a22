package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The counters live in Redis keys with a TTL, and Redis may drop a key
// before its TTL: an eviction under maxmemory, a restart without
// persistence, a FLUSHALL. A dropped key forgets the units it counted, and
// the next decisions admit them again, with no error anywhere. Eviction is
// the one of these a client can see coming: the limiter reads
// maxmemory-policy and warns when it is not noeviction.

// ErrEvictionPolicy is wrapped by the warning passed to the OnError hook
// when a Redis server's maxmemory-policy is not noeviction: under memory
// pressure Redis may then delete the limiter's keys, each deletion
// forgetting up to one window of a key's admissions, which are then
// admitted again (allkeys-*: any key; volatile-*: keys with a TTL, which
// the limiter's are, so they are evicted first when the server's other
// keys have none). With noeviction a full server refuses writes instead
// (OOM): a failure, which the breaker and the failure policy handle.
var ErrEvictionPolicy = errors.New("redisstore: warning: Redis may evict the limiter's counters (maxmemory-policy is not noeviction): an evicted key forgets up to one window of admissions, which are then admitted again; use a dedicated instance or database with maxmemory-policy noeviction")

// ErrEvictionUnchecked is wrapped by the note passed to the OnError hook,
// once per Limiter, when Redis refuses CONFIG GET maxmemory-policy (the
// command renamed or disabled, an ACL without +config|get, a managed
// service): the limiter cannot tell whether its counters can be evicted.
var ErrEvictionUnchecked = errors.New("redisstore: warning: could not read Redis's maxmemory-policy (CONFIG GET refused), so the limiter cannot check that its counters are safe from eviction; make sure the server's policy is noeviction")

// checkTimeout bounds one check's round trips.
const checkTimeout = 2 * time.Second

// evictionCheck is a Limiter's reading of maxmemory-policy: at New, when
// the breaker (or a hybrid limiter's failure state) closes after an
// outage, and at the first decision Redis answers after a check that
// Redis did not answer. Each check runs in a goroutine of its own, which
// Close cancels and waits for.
type evictionCheck struct {
	mu      sync.Mutex // guards stopped, and orders wg.Add before Close's wg.Wait
	stopped bool
	wg      sync.WaitGroup
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	// again: the last check met no answer (Redis down or slow): the next
	// decision Redis answers starts one. An atomic load on that path.
	again   atomic.Bool
	refused atomic.Bool // ErrEvictionUnchecked was reported
}

// startCheck runs one check in the background, unless Close has begun.
func (l *Limiter) startCheck() {
	ec := &l.evict
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if ec.stopped {
		return
	}
	ec.wg.Add(1)
	go func() {
		defer ec.wg.Done()
		l.checkEviction()
	}()
}

// stopChecks cancels the checks in flight and waits for them (Close).
func (l *Limiter) stopChecks() {
	ec := &l.evict
	ec.mu.Lock()
	ec.stopped = true
	ec.mu.Unlock()
	ec.cancel()
	ec.wg.Wait()
}

// waitChecks returns when no check runs (tests).
func (l *Limiter) waitChecks() { l.evict.wg.Wait() }

// answeredDecision is called after a decision Redis answered: if the last
// check met no answer, it starts one.
func (l *Limiter) answeredDecision() {
	if l.evict.again.Load() && l.evict.again.CompareAndSwap(true, false) {
		l.startCheck()
	}
}

// checkEviction reads maxmemory-policy from every server the client
// writes to (each master of a ClusterClient, each shard of a Ring) and
// reports, through the OnError hook, each one not noeviction
// (ErrEvictionPolicy), and the first refusal of CONFIG GET
// (ErrEvictionUnchecked, once per Limiter). A server that does not
// answer is left for the next check.
func (l *Limiter) checkEviction() {
	ctx, cancel := context.WithTimeout(l.evict.ctx, checkTimeout)
	defer cancel()
	one := func(ctx context.Context, c redis.UniversalClient, addr string) error {
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		var reply redis.Error
		if err != nil && !errors.As(err, &reply) {
			l.evict.again.Store(true) // no answer: Redis down or slow, or Close
			return nil
		}
		p, ok := res["maxmemory-policy"]
		if err != nil || !ok {
			if err == nil {
				err = errors.New("no maxmemory-policy in the reply")
			}
			if !l.evict.refused.Swap(true) {
				l.report(fmt.Errorf("%w: %s: %w", ErrEvictionUnchecked, addr, err))
			}
			return nil
		}
		if p != "noeviction" {
			l.report(fmt.Errorf("%w: %s has maxmemory-policy %s", ErrEvictionPolicy, addr, p))
		}
		return nil
	}
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return one(ctx, n, n.Options().Addr)
		}); err != nil {
			l.evict.again.Store(true) // the slot map could not be loaded
		}
	case *redis.Ring:
		if err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return one(ctx, n, n.Options().Addr)
		}); err != nil {
			l.evict.again.Store(true)
		}
	case *redis.Client:
		_ = one(ctx, c, c.Options().Addr)
	default:
		_ = one(ctx, c, "Redis")
	}
}
