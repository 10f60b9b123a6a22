package engine

import (
	"sync/atomic"
)

// cacheLine pads the buffer's tail away from the fields around it: writers
// of sampled keys CAS it from every core.
const cacheLine = 64

// auditRing is a bounded multi-producer, single-consumer queue (Vyukov's
// bounded MPMC queue with one consumer). Cell i of lap k holds sequence
// number i+k·len while free for position i+k·len, and position+1 once its
// event is written.
//
// Invariant: a writer owns a cell from its successful CAS of tail (from p
// to p+1, made only while the cell's seq equals p) until it stores seq =
// p+1; the consumer owns it from loading seq == p+1 until it stores seq =
// p+len. Those stores and loads are the only synchronisation: the event's
// plain fields are written before the releasing store and read after the
// acquiring load, so each side sees the other's writes whole. A cell whose
// writer has claimed it but not finished stops the consumer there; the
// events behind it wait for the next drain, never skipped.
type auditRing struct {
	_     [cacheLine]byte
	tail  atomic.Uint64 // the next position a writer claims
	_     [cacheLine - 8]byte
	head  uint64 // the next position the consumer reads; under auditor.mu
	mask  uint64
	cells []auditCell
}

type auditCell struct {
	seq atomic.Uint64
	ev  auditEvent
}

func newAuditRing(size int) *auditRing {
	r := &auditRing{mask: uint64(size - 1), cells: make([]auditCell, size)}
	for i := range r.cells {
		r.cells[i].seq.Store(uint64(i))
	}
	return r
}

// push appends ev, or reports false when the buffer is full, or when keep
// > 0 and fewer than keep cells after it are free: a decision leaves the
// last cells to take-backs (see auditor.push). Lock-free: a failed CAS
// means another writer claimed the position. The position it took is
// returned too (for the drain's wake-up and the take-backs' ids).
func (r *auditRing) push(ev auditEvent, keep uint64) (uint64, bool) {
	pos := r.tail.Load()
	for {
		if keep > 0 {
			// The cell keep positions on still holds an event of the
			// previous lap: fewer than keep cells are free.
			if c := &r.cells[(pos+keep)&r.mask]; int64(c.seq.Load()-(pos+keep)) < 0 {
				return pos, false
			}
		}
		c := &r.cells[pos&r.mask]
		switch d := int64(c.seq.Load() - pos); {
		case d == 0:
			if r.tail.CompareAndSwap(pos, pos+1) {
				c.ev = ev
				c.seq.Store(pos + 1) // publishes ev to the consumer
				return pos, true
			}
			pos = r.tail.Load()
		case d < 0:
			// The cell still holds an event of the previous lap, or its
			// writer has not finished: the buffer is full.
			return pos, false
		default:
			pos = r.tail.Load() // another writer took pos meanwhile
		}
	}
}

// pushPair claims two consecutive cells, writes ev into the first and
// leaves the second to fill, or reports false when either is not free.
// Both cells are checked free for their positions before the CAS of tail
// from pos to pos+2, which succeeds only while pos is still the tail: a
// cell at or past tail is claimed by no writer and only ever becomes free
// (the consumer frees it), so the CAS owns them both. The consumer stops
// at the second cell until fill.
func (r *auditRing) pushPair(ev auditEvent) (uint64, bool) {
	pos := r.tail.Load()
	for {
		c, c2 := &r.cells[pos&r.mask], &r.cells[(pos+1)&r.mask]
		d := int64(c.seq.Load() - pos)
		switch {
		case d == 0:
			// A seq equal to the position does not prove a cell free: a
			// writer that claimed it may not have stored yet, and then
			// pos is stale. The CAS of tail settles that; before it, the
			// second cell tells full (an older lap) from stale (written
			// already at pos+1: reload).
			switch d2 := int64(c2.seq.Load() - (pos + 1)); {
			case d2 < 0:
				return pos, false // the second cell holds the previous lap's event
			case d2 > 0:
				pos = r.tail.Load()
				continue
			}
			if r.tail.CompareAndSwap(pos, pos+2) {
				c.ev = ev
				c.seq.Store(pos + 1)
				return pos, true
			}
			pos = r.tail.Load()
		case d < 0:
			return pos, false
		default:
			pos = r.tail.Load()
		}
	}
}

// fill writes ev into the cell at pos, claimed by pushPair, and publishes
// it to the consumer.
func (r *auditRing) fill(pos uint64, ev auditEvent) {
	c := &r.cells[pos&r.mask]
	c.ev = ev
	c.seq.Store(pos + 1)
}

// pop takes the next event, or reports false when none is ready. Consumer
// only (under auditor.mu).
func (r *auditRing) pop() (auditEvent, bool) {
	c := &r.cells[r.head&r.mask]
	if c.seq.Load() != r.head+1 {
		return auditEvent{}, false
	}
	ev := c.ev
	ev.pos = r.head
	c.ev = auditEvent{}              // no reference to the key is kept
	c.seq.Store(r.head + r.mask + 1) // frees the cell for the next lap
	r.head++
	return ev, true
}
