package peers

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/puzpuzpuz/xsync/v3"
)

// OldLayout is a replica of ringlimit's key table before issue 10, for the
// memory and GC comparison (cmd/peergc): per shard an
// xsync.MapOf[{hash, key string} → *ring], the caller's key string retained
// in the map entry, and each ring a separate 96-byte object (last and 11
// slots, N = 10). Its decision is a plain walk and an add: it is a model of
// the old memory layout, not of the old algorithm, and is not a limiter to
// compare speeds with.
type OldLayout struct {
	shift  uint
	shards []*xsync.MapOf[oldKey, *oldRing]
}

type oldKey struct {
	h uint64
	s string
}

type oldRing [12]atomic.Int64 // last + 11 slots: 96 bytes, a Go size class

// NewOldLayout returns an empty table of 32 shards, the old engine's
// default at GOMAXPROCS ≤ 4.
func NewOldLayout() *OldLayout {
	t := &OldLayout{shift: 64 - 5, shards: make([]*xsync.MapOf[oldKey, *oldRing], 32)}
	for i := range t.shards {
		t.shards[i] = xsync.NewMapOfWithHasher[oldKey, *oldRing](func(k oldKey, seed uint64) uint64 { return k.h ^ seed })
	}
	return t
}

func oldMix(h uint64) uint64 { // the old keyhash.Mix, seed 0
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Allow finds or creates key's ring (retaining key, as the old table did)
// and adds one to its current slot after summing all of them.
func (t *OldLayout) Allow(key string) bool {
	h := oldMix(xxhash.Sum64String(key))
	m := t.shards[h>>t.shift]
	r, ok := m.Load(oldKey{h, key})
	if !ok {
		r, _ = m.LoadOrStore(oldKey{h, key}, new(oldRing))
	}
	var sum int64
	for i := 1; i < len(r); i++ {
		sum += r[i].Load()
	}
	e := time.Now().UnixNano() / int64(100*time.Millisecond)
	_, slot := bits.Div64(0, uint64(e), 11)
	r[1+slot].Add(1)
	return sum >= 0
}

// Close is a no-op: the replica runs nothing in the background.
func (t *OldLayout) Close() {}
