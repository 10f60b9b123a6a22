package ringslot

import (
	"flag"
	"os"
)

// The long randomized runs run a short form by default, so that make test
// stays quick, and their long form under `go test -long` or
// RINGLIMIT_LONG=1 (make long).
var longFlag = flag.Bool("long", false, "run the long form of the randomized tests (make long; also RINGLIMIT_LONG=1)")

// scaled returns short in the default run and long under -long.
func scaled[N int | int64 | uint64](short, long N) N {
	if *longFlag || os.Getenv("RINGLIMIT_LONG") == "1" {
		return long
	}
	return short
}
