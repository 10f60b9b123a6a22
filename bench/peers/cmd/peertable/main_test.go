package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkFast/peer=ringlimit-fixed/scenario=hot-serial-2   	 100	 40.00 ns/op	 1.000 allowed/op	 0 B/op	 0 allocs/op
BenchmarkFast/peer=ringlimit-fixed/scenario=hot-serial-2   	 100	 60.00 ns/op	 1.000 allowed/op	 0 B/op	 0 allocs/op
BenchmarkFast/peer=ringlimit-fixed/scenario=hot-serial-2   	 100	 50.00 ns/op	 1.000 allowed/op	 0 B/op	 0 allocs/op
BenchmarkFast/peer=ulule/scenario=hot-serial-2             	 100	 200.0 ns/op	 1.000 allowed/op	 24 B/op	 2 allocs/op
--- BENCH: BenchmarkHalfDenied/peer=ulule/scenario=hot-serial-2
    bench_test.go:77: calibrated peer=ulule
BenchmarkHalfDenied/peer=ulule/scenario=hot-serial-2       	 100	 300.0 ns/op	 0.5000 allowed/op	 24 B/op	 2 allocs/op
BenchmarkHalfDenied/peer=ringlimit-fixed/scenario=hot-serial-2 	 100	 30.00 ns/op	 0.9000 allowed/op	 0 B/op	 0 allocs/op
PASS
`

func TestParseAndWrite(t *testing.T) {
	r := newResults()
	if err := r.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.tables, ","); got != "Fast,HalfDenied" {
		t.Fatalf("tables %q", got)
	}
	if m, _ := r.med("Fast", "ringlimit-fixed", "hot-serial", "ns/op"); m != 50 {
		t.Fatalf("median %v, want 50", m)
	}
	var out strings.Builder
	r.write(&out)
	s := out.String()
	for _, want := range []string{
		"| ringlimit-fixed | 50.0 |",
		"| ulule | 200 [2] |",
		"| hot-serial | ringlimit-fixed | 50.0 | ulule | 200 | 4.00× |",
		"| ringlimit-fixed | 30.0 · 0.90* |",
		"| hot-serial | – | – | – | – | – |", // the only ringlimit cell is not comparable
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
