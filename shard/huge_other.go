//go:build !linux

package shard

import "unsafe"

// adviseHuge does nothing outside Linux: huge pages are a best effort.
func adviseHuge(unsafe.Pointer, int) {}
