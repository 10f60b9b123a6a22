package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Ping reports whether Redis can decide: it runs the limiter's script, as
// the breaker's probe does, on a probe key of its own (adding one unit
// there, never to a user key), on every master of a ClusterClient, on
// every shard of a Ring (each shard of the Ring's options, one its
// heartbeat has marked down included), on the one server of any other
// client. It returns nil when each ran it, else an error naming each
// server that did not. It counts in no Stats
// field but NoScript (it loads the script where Redis lacks it), and does
// not call the OnError hook.
//
// New does not talk to Redis, as redis.NewClient and sql.Open do not: call
// Ping at start-up to fail fast. It is named for redis.Client.Ping and
// sql.DB.PingContext, the checks Go services already make at start-up, but
// unlike Redis's PING it fails on a server that answers PING and cannot
// decide: a replica left behind by a failover (READONLY), a full server
// with noeviction (OOM), a Cluster node still joining (CLUSTERDOWN).
func (l *Limiter) Ping(ctx context.Context) error {
	if r, ok := l.client.(*redis.Ring); ok {
		return l.pingRing(ctx, r)
	}
	cc, ok := l.client.(*redis.ClusterClient)
	if !ok {
		if err := l.probeCall(ctx, l.client, ""); err != nil {
			return fmt.Errorf("redisstore: Ping: %w", err)
		}
		return nil
	}
	// One probe key per master: the first user keys whose probe keys its
	// slots hold.
	masters := map[string]bool{}
	var mu sync.Mutex // ForEachMaster calls its function concurrently
	if err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = true
		mu.Unlock()
		return nil
	}); err != nil {
		return fmt.Errorf("redisstore: Ping: %w", err)
	}
	var errs []error
	for i := 0; len(masters) > 0 && i < 1000*(len(masters)+1); i++ {
		k := strconv.Itoa(i)
		c, err := cc.MasterForKey(ctx, l.probeName(k))
		if err != nil {
			return fmt.Errorf("redisstore: Ping: %w", err)
		}
		addr := c.Options().Addr
		if !masters[addr] {
			continue
		}
		delete(masters, addr)
		if err := l.probeCall(ctx, l.client, k); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: Ping: %s: %w", addr, err))
		}
	}
	for addr := range masters {
		errs = append(errs, fmt.Errorf("redisstore: Ping: %s: no key of this node found to probe", addr))
	}
	return errors.Join(errs...)
}

// pingRing is Ping on a Ring: the probe on each shard's own client (the
// probe key need not be one the Ring routes there), and an error for a
// shard of the options that the Ring no longer lists as up.
func (l *Limiter) pingRing(ctx context.Context, r *redis.Ring) error {
	up := map[string]*redis.Client{}
	for _, c := range r.GetShardClients() {
		up[c.Options().Addr] = c
	}
	var names []string
	for name := range r.Options().Addrs {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		addr := r.Options().Addrs[name]
		c, ok := up[addr]
		if !ok {
			errs = append(errs, fmt.Errorf("redisstore: Ping: shard %s (%s): the Ring marked it down", name, addr))
			continue
		}
		delete(up, addr)
		if err := l.probeCall(ctx, c, ""); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: Ping: shard %s (%s): %w", name, addr, err))
		}
	}
	for addr, c := range up { // shards added by SetAddrs
		if err := l.probeCall(ctx, c, ""); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: Ping: shard %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}
