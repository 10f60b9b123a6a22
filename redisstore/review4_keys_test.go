package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// TestAdvKeyNames: tricky user keys stay distinct, independent, and keep
// their counts.
func TestReview4KeyNames(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
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
}

// TestAdvEmptyKeyCluster: "the geometry, after the tag, never changes the
// slot" and "a request touches one slot and never gets CROSSSLOT". For the
// empty user key the tag is "{}", which Redis Cluster does not treat as a
// hash tag: the whole name is hashed.
func TestReview4EmptyKeyCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, MaxRetries: -1})
	defer cc.Close()
	ctx := context.Background()
	var slots []int64
	for _, w := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 7 * time.Second} {
		l, err := New(cc, engine.Config{Limit: 10, Window: w})
		if err != nil {
			t.Fatal(err)
		}
		slot, err := cc.ClusterKeySlot(ctx, l.Key("")).Result()
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		slots = append(slots, slot)
	}
	t.Logf("slots of the empty key under 5 geometries: %v", slots)
	for _, s := range slots[1:] {
		if s != slots[0] {
			t.Errorf("the geometry moved the empty key to another slot: %v", slots)
			break
		}
	}
	// The hybrid mode's dedup key must share the state key's slot.
	var errs []error
	l, err := New(cc, engine.Config{Limit: 1000, Window: time.Second}, WithHybrid(5*time.Millisecond, 10), WithOnError(func(e error) { errs = append(errs, e) }))
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		_, err := l.AllowN(ctx, "", 1)
		if err != nil {
			t.Errorf("hybrid decision on the empty key: %v", err)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Errorf("hybrid Close: %v", err)
	}
	st := l.Stats()
	t.Logf("hybrid stats %+v errs %v", st, errs)
	if st.Failures != 0 || st.LostUnits != 0 {
		t.Errorf("hybrid on the empty key in a Cluster: %+v %v", st, errs)
	}
}
