package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// The pool logs every failed dial; the tests kill servers on purpose.
func init() { redis.SetLogger(quietLogger{}) }

// client returns a client of s with go-redis retries off and 300 ms
// timeouts, closed when the test ends: a round trip to a stalled server
// fails at 300 ms.
func client(tb testing.TB, s *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
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
