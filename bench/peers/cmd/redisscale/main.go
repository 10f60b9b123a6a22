// Command redisscale runs R replicas of a redisstore limiter (each with its
// own client and Limiter, as R processes would) against one redis-server,
// with a Zipf load over many tenants and a few hot keys at a low limit, in
// the plain and the hybrid mode, and prints one Markdown row per mode and
// R: decisions/s, p50 and p99 latency, script calls and round trips per
// decision, Redis CPU per decision (INFO cpu) and the scripts' run time
// (INFO commandstats: wall time, which includes the server's waits for a
// core on a loaded machine), the replicas' own CPU per
// decision (the process's), and the most admitted on a hot key in its
// window against the limit and the hybrid bound. With -rounds n it runs
// every row n times, in turn, and prints each figure's median.
//
//	go run ./cmd/redisscale                                 # starts its own redis-server
//	go run ./cmd/redisscale -redis 127.0.0.1:6379 -r 1,4,16 # an existing one (CONFIG RESETSTAT is run on it)
//	go run ./cmd/redisscale -rounds 5 -modes plain -r 1,16  # medians of 5 rounds
//
// The total number of callers is fixed (-callers), split over the
// replicas, so the rows compare the same offered load. The window
// (-window, a minute by default) outlasts a run (-dur), so a hot key's
// admitted units are one window's.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

type params struct {
	callers         int
	rate            float64 // decisions/s offered in total (0: each caller calls again at once)
	dur, window     time.Duration
	tenants         uint64
	skew            float64
	hot             int
	hotLimit, limit int64
	hotShare        float64
	interval        time.Duration
	maxLocal        int64
	connsPerReplica int
	linger          time.Duration
	addr, modes, rs string
	cluster         bool
	rounds          int
	nodes           []string // the servers: one, or a Cluster's masters
}

func main() {
	var p params
	flag.IntVar(&p.callers, "callers", 64, "callers in total, split over the replicas")
	flag.Float64Var(&p.rate, "rate", 0, "decisions/s offered in total, paced over the callers (0: as fast as they go, a closed loop)")
	flag.DurationVar(&p.dur, "dur", 3*time.Second, "duration of each run")
	flag.DurationVar(&p.window, "window", time.Minute, "the limiters' window")
	flag.Uint64Var(&p.tenants, "tenants", 10000, "tenants (keys) of the Zipf load")
	flag.Float64Var(&p.skew, "zipf", 1.1, "Zipf exponent s (> 1)")
	flag.IntVar(&p.hot, "hot", 4, "hot keys")
	flag.Int64Var(&p.hotLimit, "hotlimit", 2000, "a hot key's limit per window (KeyLimit)")
	flag.Int64Var(&p.limit, "limit", 1_000_000, "a tenant's limit per window")
	flag.Float64Var(&p.hotShare, "hotshare", 0.1, "share of calls on the hot keys")
	flag.DurationVar(&p.interval, "interval", 5*time.Millisecond, "hybrid flush interval")
	flag.Int64Var(&p.maxLocal, "maxlocal", 10, "hybrid maxLocal")
	flag.DurationVar(&p.linger, "linger", -1, "WithLinger for every replica (negative: the default)")
	flag.IntVar(&p.connsPerReplica, "pool", 0, "each replica's client PoolSize (0: go-redis's default)")
	flag.StringVar(&p.addr, "redis", "", "redis-server address (with -cluster: the masters, comma-separated); empty: start one (with -cluster: a 3-master Cluster) on loopback")
	flag.BoolVar(&p.cluster, "cluster", false, "run against a Redis Cluster (ClusterClient)")
	flag.StringVar(&p.modes, "modes", "plain,hybrid", "modes to run")
	flag.StringVar(&p.rs, "r", "1,2,4,8,16", "replica counts")
	flag.IntVar(&p.rounds, "rounds", 1, "rounds: each runs every mode and R once, in turn; a row gives each figure's median over the rounds")
	var prof profiles
	prof.flags()
	flag.Parse()
	redis.SetLogger(quiet{})
	stopProf, err := prof.start()
	if err != nil {
		log.Fatal(err)
	}
	switch {
	case p.addr != "":
		p.nodes = strings.Split(p.addr, ",")
	case p.cluster:
		nodes, stop, err := startCluster(3)
		if err != nil {
			log.Fatal(err)
		}
		defer stop()
		p.nodes = nodes
	default:
		addr, stop, err := startServer()
		if err != nil {
			log.Fatal(err)
		}
		defer stop()
		p.nodes = []string{addr}
	}
	where := "one redis-server"
	if p.cluster {
		where = fmt.Sprintf("a Cluster of %d masters", len(p.nodes))
	}
	fmt.Printf("%s; ", where)
	if p.rate > 0 {
		fmt.Printf("%.0f decisions/s offered, ", p.rate)
	}
	fmt.Printf("%d callers in total, %d tenants (Zipf s=%.2f, limit %d), %d hot keys (limit %d, %.0f%% of calls), window %v, %v per run; hybrid %v/%d, WithReplicas(R)\n\n",
		p.callers, p.tenants, p.skew, p.limit, p.hot, p.hotLimit, 100*p.hotShare, p.window, p.dur, p.interval, p.maxLocal)
	type cell struct {
		mode string
		r    int
	}
	var cells []cell
	for _, mode := range strings.Split(p.modes, ",") {
		for _, f := range strings.Split(p.rs, ",") {
			r, err := strconv.Atoi(f)
			if err != nil || r < 1 {
				log.Fatalf("-r: %q is not a replica count", f)
			}
			cells = append(cells, cell{mode, r})
		}
	}
	if p.rounds < 1 {
		log.Fatalf("-rounds: %d, want at least 1", p.rounds)
	}
	got := make([][]metrics, len(cells))
	run := 0
	for round := range p.rounds {
		for i, c := range cells {
			res, err := runOnce(p, c.mode, c.r, fmt.Sprintf("scale%d-%d:", os.Getpid(), run))
			if err != nil {
				log.Fatal(err)
			}
			run++
			got[i] = append(got[i], res.metrics())
			if p.rounds > 1 {
				fmt.Fprintf(os.Stderr, "round %d: %s\n", round+1, res.metrics().row(p, c.mode, c.r))
			}
		}
	}
	if p.rounds > 1 {
		fmt.Printf("Medians of %d rounds, figure by figure (the hot key: the most of any round).\n\n", p.rounds)
	}
	fmt.Println("| mode | R | decisions/s | p50 | p99 | script calls / decision | round trips / decision | Redis CPU / decision | scripts' run time / decision | replicas' CPU / decision | tenants admitted % | hot key: most admitted (limit, bound) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for i, c := range cells {
		fmt.Println(median(got[i]).row(p, c.mode, c.r))
	}
	if err := stopProf(); err != nil {
		log.Fatal(err)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
