//go:build !unix

package main

import "time"

// cpuTime is 0 where getrusage is missing: the client CPU column reads 0.
func cpuTime() time.Duration { return 0 }
