package redisstore

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// ErrUnboundedRoundTrip is passed to the OnError hook by New when the
// client's options let a round trip to a stalled server last forever (see
// New).
var ErrUnboundedRoundTrip = errors.New("redisstore: warning: the client has no read deadline (ReadTimeout -1 or -2) and no ContextTimeoutEnabled, so a round trip to a stalled server never ends: decisions still return by their callers' deadlines, but the round trip holds a sender and a connection, and Close waits for it")

// contextTimeouts reports whether client enforces context deadlines.
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// unboundedReads reports whether client's options let a read wait forever.
func unboundedReads(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client: // Options() is normalised: ReadTimeout 0 or −1 is no read deadline
		o := c.Options()
		return o.ReadTimeout <= 0 && !o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		return o.ReadTimeout <= 0 && !o.ContextTimeoutEnabled
	}
	return false
}
