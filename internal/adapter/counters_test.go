package adapter

import (
	"testing"
	"unsafe"
)

// TestCountersPadded pins the counters 64 bytes apart, so that two of them
// never share a cache line, with a full line before the first and after
// the last (the fields next to Counters in a middleware are read on every
// request).
func TestCountersPadded(t *testing.T) {
	var c Counters
	offs := []uintptr{unsafe.Offsetof(c.Allowed), unsafe.Offsetof(c.Denied), unsafe.Offsetof(c.Rejected), unsafe.Offsetof(c.Errors), unsafe.Offsetof(c.Canceled), unsafe.Offsetof(c.WouldDeny), unsafe.Offsetof(c.SettleErrors)}
	if offs[0] != CacheLine {
		t.Errorf("the first counter is at %d, want %d", offs[0], CacheLine)
	}
	for i := 1; i < len(offs); i++ {
		if d := offs[i] - offs[i-1]; d != CacheLine {
			t.Errorf("counter %d is %d bytes after counter %d, want %d", i, d, i-1, CacheLine)
		}
	}
	if tail := unsafe.Sizeof(c) - offs[len(offs)-1]; tail != CacheLine {
		t.Errorf("the last counter has %d bytes to the end, want %d", tail, CacheLine)
	}
}
