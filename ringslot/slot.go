package ringslot

import (
	"sync/atomic"
	"unsafe"
)

// A slot is a counter ring's state placed in memory the key table owns (a
// slab, shard/slab.go) rather than allocated alone: the same layout as
// New's (state.go), in SlotWords words, for a key of 1 … SlotKeyMax bytes.
//
// The key's first word, its head (the length byte, then up to 7 of its
// bytes, zero-padded), is the slot's publication word: 0 while the slot is
// free or being filled, then the key's head.
//
// Invariants:
//   - One writer fills a slot, which the table gave it alone (a claim,
//     shard/slab.go), and it is never reused: the head moves from 0 to the
//     key's head once, by an atomic store, and never changes again.
//   - Everything else in the slot (the ring's words, the rest of the key)
//     is written before the head's store, so a reader whose atomic load of
//     the head returns the key's head sees them (the store synchronizes
//     before the load, on arm64 as on amd64) and may read the key's other
//     bytes with plain loads: they never change again. Until then the
//     slot is reachable by no one but its writer and such probes, which
//     read nothing else of it.
//   - No key's head is 0: a key's length byte is 1 … 127.

// SlotWords returns the words of a slot for this geometry, or 0 when its
// rings are not placed in slots (a log or a token bucket). A slot holds the
// ring and a key of up to SlotKeyMax bytes, rounded up to whole cache
// lines: the size New gives a key of 1 … 8 bytes.
func (g *Geometry) SlotWords() int {
	if g.special {
		return 0
	}
	return stateBytes(g.words, 8) / 8
}

// SlotKeyMax returns the longest key a slot holds (0 when SlotWords is 0):
// what the slot's bytes leave after the ring and the length byte, and at
// most 127, so that the length takes one byte.
func (g *Geometry) SlotKeyMax() int {
	if g.special {
		return 0
	}
	return min(g.SlotWords()*8-g.keyOff-1, 127)
}

// headOf returns the head a slot holding key publishes: key's length byte
// and its first 7 bytes, as they lie in memory (1 ≤ len(key) ≤ 127).
func headOf(key string) uint64 {
	if unalignedLoads && len(key) >= 8 { // little-endian CPUs that load at any address
		return *(*uint64)(unsafe.Pointer(unsafe.StringData(key)))<<8 | uint64(len(key))
	}
	var b [8]byte
	b[0] = byte(len(key))
	copy(b[1:], key)
	return *(*uint64)(unsafe.Pointer(&b))
}

// SlotHead returns the head a slot publishes for key, or 0 when key cannot
// live in a slot (empty, or longer than SlotKeyMax; 0 matches no slot's
// published head).
func (g *Geometry) SlotHead(key string, keyMax int) uint64 {
	if uint(len(key)-1) >= uint(keyMax) { // keyMax is SlotKeyMax, passed so that this inlines; len 0 wraps
		return 0
	}
	return headOf(key)
}

// head returns the address of r's key head, which is 8-byte aligned
// (keyOff is a whole number of words).
func (g *Geometry) head(r Ring) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(r.p), g.keyOff))
}

// LoadHead returns r's head with an atomic load: 0, slotClaimed, or a
// key's head, after which the slot's contents are visible.
func (g *Geometry) LoadHead(r Ring) uint64 { return g.head(r).Load() }

// SlotTailMatches reports whether the slot r, whose head the caller loaded
// and found equal to SlotHead(key), holds key: the bytes after the head.
// The caller's atomic load of the head makes them visible.
func (g *Geometry) SlotTailMatches(r Ring, key string) bool {
	n := len(key)
	if n <= 7 {
		return true // the head holds the whole key
	}
	p := unsafe.Add(unsafe.Pointer(r.p), g.keyOff+1) // the key's first byte
	if unalignedLoads && n <= 15 {
		// Bytes n−8 … n−1 with the head's 0 … 6 cover the key.
		return *(*uint64)(unsafe.Add(p, n-8)) == *(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.StringData(key)), n-8))
	}
	return unsafe.String((*byte)(unsafe.Add(p, 7)), n-7) == key[7:]
}

// NewInSlot is New for key in the slot at p, which the caller claimed
// alone and which is all zero: it writes the ring and the key,
// then publishes the key's head. 1 ≤ len(key) ≤ SlotKeyMax.
func (g *Geometry) NewInSlot(p unsafe.Pointer, t, limit int64, key string) Ring {
	w := unsafe.Slice((*atomic.Int64)(p), g.SlotWords())
	g.initRing(w, t, limit)
	k := unsafe.Add(p, g.keyOff+8)
	if len(key) > 7 {
		copy(unsafe.Slice((*byte)(k), len(key)-7), key[7:])
	}
	r := Ring{p: &w[0]}
	// The release of everything above: a reader that loads this head
	// sees the ring's initial words and the key's bytes.
	g.head(r).Store(headOf(key))
	return r
}
