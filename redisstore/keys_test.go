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

// Distinct user keys give distinct Redis keys and independent counts:
// braces (the hash tag), tricky bytes, and the escaping of the empty key,
// one subtest each on one server (each starts from an empty database).
func TestKeysStayDistinct(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	t.Run("Braces", func(t *testing.T) {
		if err := c.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		cfg := engine.Config{Limit: 2, Window: time.Minute, SubWindows: 6}
		l := mustNew(t, c, cfg)
		keys := []string{"a{b}c", "{a}", "a", "{a", "a}", `\(a\)`, "(a)", "}{", "", `\`, `\\`}
		seen := map[string]string{}
		for _, k := range keys {
			rk := l.Key(k)
			if o, dup := seen[rk]; dup {
				t.Fatalf("keys %q and %q share the Redis key %q", o, k, rk)
			}
			seen[rk] = k
			// The tag is everything between the first '{' and the next '}',
			// and only the geometry follows it.
			i := strings.IndexByte(rk, '{')
			j := strings.IndexByte(rk[i+1:], '}')
			if i+1+j != len(rk)-1-len(":w10000000n6") || !strings.HasSuffix(rk, "}:w10000000n6") {
				t.Fatalf("key %q: Redis key %q: the hash tag does not end just before the geometry", k, rk)
			}
		}
		for _, k := range keys {
			for i := range 3 {
				d, err := l.AllowN(ctx, k, 1)
				if err != nil || d.Allowed != (i < 2) {
					t.Fatalf("key %q step %d: %+v %v (keys must not share counts)", k, i, d, err)
				}
			}
			ttl, err := c.PTTL(ctx, l.Key(k)).Result()
			if err != nil || ttl <= 0 || ttl > cfg.Window+cfg.Window/6 {
				t.Fatalf("key %q: PTTL %v %v", k, ttl, err)
			}
		}
	})
	// Tricky user keys stay distinct, independent, and keep
	// their counts.
	t.Run("Tricky", func(t *testing.T) {
		if err := c.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := New(c, engine.Config{Limit: 3, Window: time.Minute, Algorithm: engine.FixedWindow, MaxKeyBytes: 100000}) // the 100,000-byte key is held
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		keys := []string{"", "{", "}", "\\", "\\(", "\\)", "{}", "a{b}c", "a\\(b\\)c", "\x00", "\x00\xff", "\\\\", "}{", ":w1n0", "}:w1n0", strings.Repeat("x", 100000), "\xff\xfe", "a\nb", " "}
		seen := map[string]string{}
		for _, k := range keys {
			rk := l.Key(k)
			t.Logf("%q -> %q", k[:min(len(k), 12)], rk[:min(len(rk), 60)])
			if o, ok := seen[rk]; ok {
				t.Errorf("keys %q and %q share Redis key %q", o, k, rk)
			}
			seen[rk] = k
		}
		for i, k := range keys {
			for j := 0; j <= i%3; j++ {
				d, err := l.AllowN(context.Background(), k, 1)
				if err != nil || !d.Allowed {
					t.Errorf("key %q: %+v %v", k[:min(len(k), 12)], d, err)
				}
			}
		}
		for i, k := range keys {
			if got := storedUnits(t, c, l, k); got != int64(i%3+1) {
				t.Errorf("key %q holds %d units, want %d", k[:min(len(k), 12)], got, i%3+1)
			}
			d, err := l.AllowN(context.Background(), k, 0)
			if err != nil || d.Remaining != int64(3-(i%3+1)) {
				t.Errorf("peek key %q: %+v %v", k[:min(len(k), 12)], d, err)
			}
		}
	})
	// Key escaping: distinct user keys give distinct Redis keys and counters,
	// including the empty key's "\e" against user keys that look like it.
	t.Run("Escaping", func(t *testing.T) {
		if err := c.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l := mustNew(t, c, engine.Config{Limit: 100, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
		keys := []string{"", "\\e", "\\", "e", "\\\\e", "\\(", "{", "}", "(", ")", "\\)", "{}", "\\e}", "}\\e", "\x1b", "\\\\", "\\{", "\\(e", "e\\"}
		seen := map[string]string{}
		for _, k := range keys {
			rk := l.Key(k)
			if o, ok := seen[rk]; ok {
				t.Errorf("user keys %q and %q share Redis key %q", o, k, rk)
			}
			seen[rk] = k
		}
		// brute force short keys over the alphabet of special characters
		alpha := []string{"\\", "{", "}", "e", "(", ")"}
		var gen func(prefix string, depth int)
		gen = func(prefix string, depth int) {
			rk := l.Key(prefix)
			if o, ok := seen[rk]; ok && o != prefix {
				t.Errorf("user keys %q and %q share Redis key %q", o, prefix, rk)
			}
			seen[rk] = prefix
			if depth == 0 {
				return
			}
			for _, a := range alpha {
				gen(prefix+a, depth-1)
			}
		}
		gen("", 5)
		for i, k := range keys {
			if _, err := l.AllowN(ctx, k, int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		for i, k := range keys {
			if got := storedUnits(t, c, l, k); got != int64(i+1) {
				t.Errorf("key %q (%q) holds %d units, want %d", k, l.Key(k), got, i+1)
			}
		}
	})
}
