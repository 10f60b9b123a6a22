package shard

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/ringlimit/ringlimit/ringslot"
)

// The home slab: the states of most keys live in one large pointer-free
// allocation per table, each at one of two slots derived from its key's
// hash (ringslot/slot.go has a slot's layout), so that a Load finds them
// without the map: it loads both candidate slots' heads before comparing
// either, and a hit costs the state's own lines, which the decision reads
// next anyway. The map stays the index of record: every ring, in a slot or
// not, is stored there as before, and a Load that finds no live ring for
// its key in the slab asks the map.
//
// A key whose two slots are both taken, a key longer than the slot holds,
// a log or a token bucket, and every key of a geometry whose slot would
// exceed slabMaxSlotBytes get a state of their own (ringslot.Geometry.New),
// and so does every key while the table has no slab: it starts the first
// when slabFromKeys keys are present, and drops its slabs when a sweep
// leaves fewer than half as many (slabtune.go has why).
//
// Generations. A slot is never reused: once claimed it holds its key's
// ring, live and then retired, for as long as the slab exists. When a
// slab's claimed slots reach slabFill of it, the table starts a new one,
// sized from the keys present, and new rings (created, revived, replaced)
// go there, or, when both of the key's slots there are taken, to one of
// its slots in the slab before; Load probes the newest slab, then the two
// before it together. An older
// slab is referenced only by the rings in it, through the map and through
// writers that still hold one: the collector frees it when the last of
// them is gone, as it frees a state of its own today. A sweep that leaves
// the keys far below the newest slab's size starts a smaller one, so that
// idle keys reclaimed give their memory back.
//
// Invariants (docs/design.md, "The home slab"):
//   - A slot's head is published once, for one key, by the Compute that
//     creates the slot's ring and stores it in the map; it never changes
//     again (the slot is never reused, in this slab or any other).
//   - A ring leaves the map only retired (Replace, Swap, remove), and a
//     retired ring never comes back to life.
//
// So a ring that Load finds in a slot whose head and bytes are the key's,
// and that is not retired when Load reads its last word, is the key's ring
// in the map at that moment: the hit is the map's answer at that moment.
type slab struct {
	mem  []atomic.Int64 // slots × the table's slotWords; pointer-free, so never scanned
	base unsafe.Pointer // &mem[0]
	mask uint64         // slots − 1
	fill int64          // claims at which the table starts the next slab
	// taken has a bit per slot, set once by the writer that claims it
	// (an atomic Or: one claimer per slot). A separate word, so that the
	// slot's head is written by its one writer only, and read with
	// plain loads after its publication.
	taken []atomic.Uint64
	claim atomic.Int64 // slots claimed
}

// slabs are the three slabs Load probes: the newest, where new rings go
// (or to prev, when both of their slots in the newest are taken), and the
// two before it (nil when none). It is replaced as a whole.
type slabs struct{ cur, prev, old *slab }

// probedSlabs returns g's slabs that Load probes, newest first.
func probedSlabs(g *slabs) []*slab {
	var out []*slab
	if g != nil {
		for _, a := range [3]*slab{g.cur, g.prev, g.old} {
			if a != nil {
				out = append(out, a)
			}
		}
	}
	return out
}

const (
	// slabMaxSlotBytes is the largest slot a slab holds: geometries with
	// larger states (many sub-windows) keep a state per key.
	slabMaxSlotBytes = 512
	// slabShrink: a sweep that leaves fewer keys than 1/slabShrink of the
	// newest slab's slots starts a smaller one.
	slabShrink = 8
)

// newSlab returns an empty slab of slots slots (a power of two) of words
// words each. Its memory comes from the Go heap: the collector paces on
// it like on any state (a slab outside the heap made it collect three
// times as often), and does not scan it.
func newSlab(slots, words int) *slab {
	mem := make([]atomic.Int64, slots*words)
	adviseHuge(unsafe.Pointer(&mem[0]), len(mem)*8)
	return &slab{
		mem:   mem,
		base:  unsafe.Pointer(&mem[0]),
		mask:  uint64(slots - 1),
		fill:  int64(slots) - int64(slots)>>slabFillShift,
		taken: make([]atomic.Uint64, (slots+63)/64),
	}
}

// slots returns a's two candidate slot addresses for hash h: from its low
// bits, and from its bits 32 and up (the shard's are the top ones; xsync's
// are the low ones, which do not matter here).
// (newRing claims the same two.)
func (t *Table) slots(a *slab, h uint64) (unsafe.Pointer, unsafe.Pointer) {
	sz := uintptr(t.slotWords) * 8
	return unsafe.Add(a.base, uintptr(h&a.mask)*sz), unsafe.Add(a.base, uintptr(bits.RotateLeft64(h, 32)&a.mask)*sz)
}

// probe returns the live ring of the key whose slot head is head (not 0)
// from a or b (b may be nil), if one of h's slots in them holds it:
// Load's look in the slabs before the newest (it inlines its own look in
// the newest). The heads of all four slots are loaded before any is
// compared, so that their cache misses overlap.
func (t *Table) probe(a, b *slab, h uint64, key string, head uint64) (ringslot.Ring, bool) {
	p, q := t.slots(a, h)
	r, s := ringslot.RingAt(p), ringslot.RingAt(q)
	hr, hs := t.geo.LoadHead(r), t.geo.LoadHead(s)
	var u, v ringslot.Ring
	var hu, hv uint64 // 0: no key's head
	if b != nil {
		p, q = t.slots(b, h)
		u, v = ringslot.RingAt(p), ringslot.RingAt(q)
		hu, hv = t.geo.LoadHead(u), t.geo.LoadHead(v)
	}
	switch {
	case hr == head && t.geo.SlotTailMatches(r, key) && !t.geo.Retired(r):
		return r, true
	case hs == head && t.geo.SlotTailMatches(s, key) && !t.geo.Retired(s):
		return s, true
	case hu == head && t.geo.SlotTailMatches(u, key) && !t.geo.Retired(u):
		return u, true
	case hv == head && t.geo.SlotTailMatches(v, key) && !t.geo.Retired(v):
		return v, true
	}
	return ringslot.Ring{}, false
}

// newRing builds key's ring, starting at start with limit, in one of its
// slots of the newest slab when one is free, else in one of its slots of
// the slab before (which Load still probes, and whose free slots would
// otherwise go unused), else in a state of its own.
// Callers hold the bucket lock of h, and store the ring in the map before
// they release it.
func (t *Table) newRing(h uint64, key string, start, limit int64) ringslot.Ring {
	if g := t.gens.Load(); g != nil && t.geo.SlotHead(key, t.slotKeyMax) != 0 {
		for _, a := range [2]*slab{g.cur, g.prev} {
			if a == nil {
				break
			}
			for _, i := range [2]uint64{h & a.mask, bits.RotateLeft64(h, 32) & a.mask} {
				if a.taken[i/64].Or(1<<(i%64))&(1<<(i%64)) == 0 {
					a.claim.Add(1)
					return t.geo.NewInSlot(unsafe.Add(a.base, uintptr(i)*uintptr(t.slotWords)*8), start, limit, key)
				}
			}
		}
	}
	return t.geo.New(start, limit, key)
}

// renew starts the next slab when the newest is filled to its share (or
// there is none yet and slabFrom keys are present), sized from the keys
// present. It runs after the
// Compute that created a ring, outside any lock: a slab of a million slots
// takes milliseconds to allocate. Concurrent callers start one slab.
func (t *Table) renew() {
	g := t.gens.Load()
	if t.slotWords == 0 || g == nil && t.live.Load() < t.slabFrom || g != nil && g.cur.claim.Load() < g.cur.fill {
		return
	}
	if !t.renewing.CompareAndSwap(false, true) {
		return // another caller is at it; rings go to the full slab or the heap meanwhile
	}
	defer t.renewing.Store(false)
	if g2 := t.gens.Load(); g2 != g {
		return
	}
	n := &slabs{cur: newSlab(t.slabSlots(t.live.Load()), t.slotWords)}
	if g != nil {
		n.prev, n.old = g.cur, g.prev
	}
	t.gens.Store(n)
}

// shrink starts a smaller slab, with no previous one, when the keys
// present have fallen below 1/slabShrink of the newest slab's slots, or
// none when they have fallen below slabFrom/2: the old slabs go once the
// rings in them are reclaimed or replaced (the map still finds them).
func (t *Table) shrink() {
	g := t.gens.Load()
	if g == nil {
		return
	}
	live := t.live.Load()
	drop := live < t.slabFrom/2 // never with Presize, whose slabFrom is 0
	slots := t.slabSlots(live)
	if !drop && (live*slabShrink >= int64(g.cur.mask+1) || slots >= int(g.cur.mask+1)) {
		return
	}
	if !t.renewing.CompareAndSwap(false, true) {
		return
	}
	defer t.renewing.Store(false)
	switch {
	case t.gens.Load() != g:
	case drop:
		t.gens.Store(nil) // the map alone, until renew sees slabFrom keys again
	default:
		t.gens.Store(&slabs{cur: newSlab(t.slabSlots(t.live.Load()), t.slotWords)})
	}
}

// slabSlots returns the slots of a new slab for keys keys present: a power
// of two, at least slabPerKey per key (one more key than present, and no
// fewer than Presize's) and slabMinSlots.
func (t *Table) slabSlots(keys int64) int {
	n := slabMinSlots
	for int64(n) < slabPerKey*max(keys+1, t.expect) {
		n *= 2
	}
	return n
}

// PresizeMax is the largest n Table.Presize takes for rings of geometry
// geo: a slab of at least slabPerKey slots per key within MaxPresizeBytes
// (for a geometry with no slots, maps presized at 64 bytes a key within
// it).
func PresizeMax(geo *ringslot.Geometry) int64 {
	w := slotWordsOf(geo)
	if w == 0 {
		return MaxPresizeBytes / 64
	}
	return MaxPresizeBytes / int64(w*8) / slabPerKey
}

// slotWordsOf returns the words of geo's slab slots, or 0 when its rings
// do not go in slots (a log, a bucket, a state above slabMaxSlotBytes).
func slotWordsOf(geo *ringslot.Geometry) int {
	if w := geo.SlotWords(); w > 0 && w*8 <= slabMaxSlotBytes {
		return w
	}
	return 0
}

// MaxPresizeBytes bounds a presized slab (PresizeMax): 4 GiB where an int
// has 64 bits, 512 MiB where it has 32 (a slice's length is an int, and an
// address space of 4 GiB must hold the rest too).
const MaxPresizeBytes = 1 << (29 + 3*(bits.UintSize/64))

// SlabID identifies the table's newest home slab by the address of its
// memory, 0 while the table has none; two slabs alive at once never share
// it. It is for tests and diagnostics (is there a slab, is it a new one).
func (t *Table) SlabID() uintptr {
	if g := t.gens.Load(); g != nil {
		return uintptr(g.cur.base)
	}
	return 0
}
