package ringslot

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// CacheLine is the size every key's state is rounded up to, and the
// alignment the allocator then gives it: 64 bytes on amd64 and arm64. Go's
// size classes that such a size falls into are themselves multiples of 64
// (128, 192, 256, 320, …, 896, …), and objects of one class sit at whole
// multiples of the class size from a page boundary, so a state starts on a
// cache line and spans as few lines as its bytes need (state_test.go pins
// both the sizes and the alignment).
const CacheLine = 64

// A key's whole state is one allocation of int64 words, which holds no
// pointers, so the garbage collector marks it without scanning it:
//
//	[0 … words)   the ring: last, the cache words, the limit, the slots
//	              (ring.go), or a log's header and timestamps (log.go)
//	then          the key: its length as a uvarint, then its bytes
//	then          zero padding up to a multiple of CacheLine
//
// The key is written before the state is published in the key table and
// never changes, so it is read with plain loads (publication through the
// table's map is the synchronizing store). Keeping it here means that the
// table stores the key's 64-bit hash rather than the caller's string: the
// string is not retained, and the key is compared in the state's own cache
// lines, which the decision loads next anyway.

// stateBytes is the size of a state of words ring words and a key of
// keyLen bytes.
func stateBytes(words, keyLen int) int {
	n := words*8 + uvarintLen(uint64(keyLen)) + keyLen
	return (n + CacheLine - 1) &^ (CacheLine - 1)
}

// alloc returns a zeroed state of words ring words followed by key.
func alloc(words int, key string) []atomic.Int64 {
	w := make([]atomic.Int64, stateBytes(words, len(key))/8)
	p := unsafe.Add(unsafe.Pointer(&w[0]), words*8)
	x := uint64(len(key))
	for ; x >= 0x80; x >>= 7 {
		*(*byte)(p) = byte(x) | 0x80
		p = unsafe.Add(p, 1)
	}
	*(*byte)(p) = byte(x)
	copy(unsafe.Slice((*byte)(unsafe.Add(p, 1)), len(key)), key)
	return w
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// keyStart returns the address of r's key (its length, then its bytes).
func (g *Geometry) keyStart(r Ring) unsafe.Pointer {
	off := g.words
	if g.log {
		off = logHdr + int(*r.at(logCap)) // fixed since creation, before publication
	}
	return unsafe.Add(unsafe.Pointer(r.p), off*8)
}

// keyOf decodes the key stored at p.
func keyOf(p unsafe.Pointer) string {
	var n uint64
	for s := uint(0); ; s += 7 {
		b := *(*byte)(p)
		p = unsafe.Add(p, 1)
		n |= uint64(b&0x7f) << s
		if b < 0x80 {
			break
		}
	}
	return unsafe.String((*byte)(p), int(n))
}

// Key returns the key r was created for. The string shares r's memory,
// which never changes; holding it keeps r's allocation alive.
func (g *Geometry) Key(r Ring) string { return keyOf(g.keyStart(r)) }

// HasKey reports whether r was created for key.
func (g *Geometry) HasKey(r Ring, key string) bool {
	if match, known := g.MatchKey(r, key); known {
		return match
	}
	return g.Key(r) == key
}

// MatchKey is HasKey's common case, small enough to inline into the key
// lookup: a counter ring's key of 8 to 16 bytes (a one-byte length),
// compared as its first and last 8 bytes, with no call to memequal. known
// is false otherwise (a log ring, a shorter or longer key): then ask
// HasKey.
func (g *Geometry) MatchKey(r Ring, key string) (match, known bool) {
	p := unsafe.Add(unsafe.Pointer(r.p), g.keyOff)
	n := uintptr(len(key))
	if !unalignedLoads || n-8 > 16-8 || g.keyOff == 0 {
		return false, false
	}
	k, d := unsafe.Pointer(unsafe.StringData(key)), n-7
	return *(*byte)(p) == byte(n) &&
		*(*uint64)(unsafe.Add(p, 1)) == *(*uint64)(k) &&
		*(*uint64)(unsafe.Add(p, d)) == *(*uint64)(unsafe.Add(k, d-1)), true
}

// unalignedLoads: the CPU loads a uint64 at any byte address (MatchKey's
// word compares); elsewhere MatchKey leaves every key to HasKey.
const unalignedLoads = runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" || runtime.GOARCH == "386"

// Bytes returns the size of the allocation of one key's state for a key of
// keyLen bytes; for a log, of its header alone (see LogBytes).
func (g *Geometry) Bytes(keyLen int) int { return stateBytes(g.words, keyLen) }
