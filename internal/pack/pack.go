// Package pack defines how a ring slot packs an epoch tag and a count into
// one int64, so that a reset and its first increment are a single CAS.
package pack

// Field widths of a packed slot word. The tag takes the high TagBits and the
// count the low CountBits:
//
//	bit 63 ............ 40 39 ................ 0
//	    tag (24 bits)       count (40 bits)
//
// 40 count bits hold 1.1e12 units per sub-window, which bounds Limit. The
// tag is the sub-window epoch modulo 2^24; a ring also keeps the full-width
// newest epoch, so a key idle for any multiple of 2^24 sub-windows is
// recognised as idle rather than aliased (see ringslot and docs/design.md).
const (
	CountBits = 40
	TagBits   = 64 - CountBits

	// MaxCount is the largest count a slot can hold. Writers never let a
	// count exceed the limit, and limits are capped at MaxCount, so a count
	// never carries into the tag.
	MaxCount  = 1<<CountBits - 1
	countMask = MaxCount
	tagMask   = 1<<TagBits - 1
)

// Tag is a sub-window epoch reduced to TagBits.
type Tag uint32

// TagOf returns the tag of a full-width epoch. Negative epochs (times before
// 1970) reduce the same way, by two's complement.
func TagOf(epoch int64) Tag { return Tag(uint64(epoch) & tagMask) }

// Word builds a slot word from a tag and a count in [0, MaxCount].
func Word(t Tag, count int64) int64 {
	return int64(uint64(t)<<CountBits | uint64(count)&countMask)
}

// TagOfWord returns the tag stored in w.
func TagOfWord(w int64) Tag { return Tag(uint64(w) >> CountBits) }

// CountOfWord returns the count stored in w.
func CountOfWord(w int64) int64 { return int64(uint64(w) & countMask) }

// Diff returns a−b as a serial-number difference in [−2^23, 2^23): positive
// when a is newer than b by less than half the tag space. A difference of
// exactly 2^23 reads as −2^23; the ring keeps every slot's epoch within
// 2^23 of the epoch it is compared with (ringslot's settle and reviveGap),
// so that never happens there.
func Diff(a, b Tag) int32 {
	// Shift the 24-bit difference to the top of an int32 and back, which
	// sign-extends it.
	return int32(uint32(a-b)<<(32-TagBits)) >> (32 - TagBits)
}
