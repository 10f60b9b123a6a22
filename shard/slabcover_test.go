package shard

import (
	"strconv"
	"testing"

	"github.com/ringlimit/ringlimit/ringslot"
)

// BenchmarkSlabCover measures where a table's keys live after n keys are
// created one after another (keys "user:0" …, the sliding window's
// geometry, 64 shards): the share of keys whose ring is in a slab Load
// probes (probed-%: found without the map), in an older slab (old-%:
// found through the map), and in a state of their own (heap-%), and the
// bytes per key of every slab still alive (slab-B/key; with no key
// reclaimed, none is freed). The figures depend on the hash seed only.
// The presized cases are the table Presize(n) sized for its n keys.
func BenchmarkSlabCover(b *testing.B) {
	type cover struct {
		n       int
		presize bool
	}
	var cases []cover
	for _, n := range []int{1_000, 100_000, 1_000_000, 10_000_000} {
		cases = append(cases, cover{n, false}, cover{n, true})
	}
	for _, c := range cases {
		n, name := c.n, "keys="+strconv.Itoa(c.n)
		if c.presize {
			name += "/presized"
		}
		b.Run(name, func(b *testing.B) {
			if n > 1_000_000 && testing.Short() {
				b.Skip("10M keys need several GB; skipped with -short")
			}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "user:" + strconv.Itoa(i)
			}
			g := ringslot.NewGeometry(sec/10, 10, true, false)
			fresh := freshAt(g, t0)
			for b.Loop() {
				tab := New(g, 64, 0)
				var all []*slab // every slab the table started
				if c.presize {
					tab.Presize(int64(n))
					all = append(all, tab.gens.Load().cur)
				}
				for _, k := range keys {
					if _, err := tab.LoadOrCreate(tab.Hash(k), k, fresh); err != nil {
						b.Fatal(err)
					}
					if gs := tab.gens.Load(); gs != nil && (len(all) == 0 || all[len(all)-1] != gs.cur) {
						all = append(all, gs.cur)
					}
				}
				probed, old := 0, 0
				tab.Range(func(_ string, r ringslot.Ring) bool {
					switch {
					case inSlab(tab, r):
						probed++
					case inSlabs(all, r):
						old++
					}
					return true
				})
				bytes := 0
				for _, a := range all {
					bytes += len(a.mem) * 8
				}
				b.ReportMetric(100*float64(probed)/float64(n), "probed-%")
				b.ReportMetric(100*float64(old)/float64(n), "old-%")
				b.ReportMetric(100*float64(n-probed-old)/float64(n), "heap-%")
				b.ReportMetric(float64(bytes)/float64(n), "slab-B/key")
				b.ReportMetric(float64(len(all)), "slabs")
			}
		})
	}
}
