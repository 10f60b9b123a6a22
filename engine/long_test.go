package engine_test

import (
	"flag"
	"os"
)

// The long randomized runs (permutations, many seeds, big storms) run a
// short form by default, so that make test stays quick, and their long
// form under `go test -long` or RINGLIMIT_LONG=1 (make long).
var longFlag = flag.Bool("long", false, "run the long form of the randomized tests (make long; also RINGLIMIT_LONG=1)")

// longRun reports whether the long form was asked for.
func longRun() bool { return *longFlag || os.Getenv("RINGLIMIT_LONG") == "1" }

// scaled returns short in the default run, long under -long, and short
// for -short too unless -long is set.
func scaled[N int | int64](short, long N) N {
	if longRun() {
		return long
	}
	return short
}
