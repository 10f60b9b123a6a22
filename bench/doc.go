// Package bench holds ringlimit's performance lab: the scenario benchmarks
// (go test -bench . ./bench/), the peer comparison in bench/peers (its own
// module) and the ringbench load tool in bench/cmd/ringbench.
package bench
