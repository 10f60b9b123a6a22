package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A key longer than Config.MaxKeyBytes is refused locally, as the engine
// refuses it: ReasonKeyTooLong, no round trip, nothing stored, KeyLimit not
// asked; a key at the cap is decided by Redis. Before, redisstore stored
// keys of any length (about 45 requests with 1 MiB keys filled a 48 MB
// Redis, and every client got 503 for seconds after).
func TestKeyTooLongRefusedLocally(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, tc := range []struct {
		name string
		max  int
		opts []Option
	}{
		{"default", 0, nil},
		{"64", 64, nil},
		{"hybrid", 64, []Option{WithHybrid(time.Millisecond, 1), withManual()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			cfg := engine.Config{Limit: 3, Window: time.Minute, MaxKeyBytes: tc.max}
			if tc.opts == nil {
				cfg.KeyLimit = func(k string) int64 { asked = append(asked, k); return 0 }
			}
			l := mustNew(t, c, cfg, append(tc.opts, WithPrefix("kl:"+tc.name+":"))...)
			max := tc.max
			if max == 0 {
				max = engine.DefaultMaxKeyBytes
			}
			if got := l.Config().MaxKeyBytes; got != max {
				t.Fatalf("Config().MaxKeyBytes = %d, want %d", got, max)
			}
			long, atCap := strings.Repeat("x", max+1), strings.Repeat("y", max)
			rounds := l.batch.rounds.Load()
			for _, cx := range []context.Context{ctx, canceled()} {
				d, err := l.AllowN(cx, long, 1)
				if err != nil || d.Allowed || d.Reason() != engine.ReasonKeyTooLong {
					t.Fatalf("key of %d bytes: %+v (%v), %v", len(long), d, d.Reason(), err)
				}
			}
			if l.batch.rounds.Load() != rounds || len(asked) != 0 {
				t.Fatalf("a refused key made %d round trips, asked KeyLimit %d times", l.batch.rounds.Load()-rounds, len(asked))
			}
			if n, err := c.Exists(ctx, l.Key(long)).Result(); err != nil || n != 0 {
				t.Fatalf("the refused key is stored: %d, %v", n, err)
			}
			if d, err := l.AllowN(ctx, atCap, 1); err != nil || !d.Allowed || d.Remaining != 2 {
				t.Fatalf("key of %d bytes (the cap): %+v, %v", len(atCap), d, err)
			}
			if st := l.Stats(); st.RedisDecisions != 1 || st.CallerGone != 0 || st.FallbackDecisions != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func canceled() context.Context { // a context done before the call
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	return cx
}
