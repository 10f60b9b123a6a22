package shard

import (
	"os"
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on amd64, and on arm64
// with 4 KiB base pages.
const hugePage = 2 << 20

// adviseOn is false when the environment sets RINGLIMIT_SLAB_HUGEPAGES=0:
// a switch for measuring the slab without huge pages, read once.
var adviseOn = os.Getenv("RINGLIMIT_SLAB_HUGEPAGES") != "0"

// adviseHuge asks the kernel to back the slab's whole huge pages with huge
// pages (MADV_HUGEPAGE), which matters when THP is "madvise": a slot probe
// then misses the TLB far less often. It is a best effort: an error (an
// old kernel, THP off) is ignored, and the slab works the same with 4 KiB
// pages.
func adviseHuge(p unsafe.Pointer, n int) {
	if !adviseOn || n < 2*hugePage {
		return
	}
	b := unsafe.Slice((*byte)(p), n) // the slab, which the caller keeps alive
	off := int(-uintptr(p) & (hugePage - 1))
	end := off + (n-off)&^(hugePage-1)
	_ = syscall.Madvise(b[off:end], 14) // MADV_HUGEPAGE
}
