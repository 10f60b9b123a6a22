//go:build !unix

package peers

import "time"

// CPUTime falls back to the wall clock where getrusage does not exist.
func CPUTime() time.Duration { return time.Duration(time.Now().UnixNano()) }
