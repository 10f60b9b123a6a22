// Command redisscale runs R replicas of a redisstore limiter (each with its
// own client and Limiter, as R processes would) against one redis-server,
// with a Zipf load over many tenants and a few hot keys at a low limit, in
// the plain and the hybrid mode, and prints one Markdown row per mode and
// R: decisions/s, p50 and p99 latency, script calls and round trips per
// decision, Redis CPU per decision (INFO cpu and commandstats), and the
// most admitted on a hot key in its window against the limit and the
// hybrid bound.
//
//	go run ./cmd/redisscale                                 # starts its own redis-server
//	go run ./cmd/redisscale -redis 127.0.0.1:6379 -r 1,4,16 # an existing one (CONFIG RESETSTAT is run on it)
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
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
)

type params struct {
	callers         int
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
	nodes           []string // the servers: one, or a Cluster's masters
}

func main() {
	var p params
	flag.IntVar(&p.callers, "callers", 64, "callers in total, split over the replicas")
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
	flag.Parse()
	redis.SetLogger(quiet{})
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
	fmt.Printf("%d callers in total, %d tenants (Zipf s=%.2f, limit %d), %d hot keys (limit %d, %.0f%% of calls), window %v, %v per run; hybrid %v/%d, WithReplicas(R)\n\n",
		p.callers, p.tenants, p.skew, p.limit, p.hot, p.hotLimit, 100*p.hotShare, p.window, p.dur, p.interval, p.maxLocal)
	fmt.Println("| mode | R | decisions/s | p50 | p99 | script calls / decision | round trips / decision | Redis CPU / decision | tenants admitted % | hot key: most admitted (limit, bound) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	run := 0
	for _, mode := range strings.Split(p.modes, ",") {
		for _, f := range strings.Split(p.rs, ",") {
			r, err := strconv.Atoi(f)
			if err != nil || r < 1 {
				log.Fatalf("-r: %q is not a replica count", f)
			}
			res, err := runOnce(p, mode, r, fmt.Sprintf("scale%d-%d:", os.Getpid(), run))
			if err != nil {
				log.Fatal(err)
			}
			run++
			fmt.Println(res.row(p, mode, r))
		}
	}
}

type result struct {
	decisions, admitted int64
	tenants, tenantsOK  int64 // decisions on tenants' keys (not the hot keys), and those admitted
	elapsed             time.Duration
	p50, p99            time.Duration
	scriptCalls, trips  int64
	cpu                 time.Duration
	hotMax              int64
	errors              int64
}

func (res result) row(p params, mode string, r int) string {
	d := float64(res.decisions)
	bound := "—"
	if mode == "hybrid" {
		bound = strconv.FormatInt(hybridBound(p.hotLimit, p.maxLocal, r), 10)
	}
	errs := ""
	if res.errors > 0 {
		errs = fmt.Sprintf(" (%d errors)", res.errors)
	}
	return fmt.Sprintf("| %s | %d | %.0f%s | %v | %v | %.3f | %.3f | %.1f µs | %.1f | %d (%d, %s) |",
		mode, r, d/res.elapsed.Seconds(), errs, res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond),
		float64(res.scriptCalls)/d, float64(res.trips)/d, float64(res.cpu.Microseconds())/d,
		100*float64(res.tenantsOK)/float64(max(1, res.tenants)), res.hotMax, p.hotLimit, bound)
}

// hybridBound is the bound over R replicas with WithReplicas(R) and
// c_i ≤ 2: L + (R − 1)·max(3·maxLocal, L/R) (redisstore README).
func hybridBound(limit, maxLocal int64, r int) int64 {
	return limit + int64(r-1)*max(3*maxLocal, limit/int64(r))
}

func runOnce(p params, mode string, r int, prefix string) (result, error) {
	var res result
	hotLimit := func(key string) int64 {
		if strings.HasPrefix(key, "hot") {
			return p.hotLimit
		}
		return 0
	}
	cfg := engine.Config{Limit: p.limit, Window: p.window, Algorithm: engine.SlidingWindowStrict, KeyLimit: hotLimit}
	if p.hot == 0 {
		cfg.KeyLimit = nil // tenants only: one limit
	}
	var trips atomic.Int64
	clients := make([]redis.UniversalClient, r)
	ls := make([]*redisstore.Limiter, r)
	for i := range r {
		var c redis.UniversalClient
		if p.cluster {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.nodes, MaxRetries: -1, PoolSize: p.connsPerReplica,
				ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(tripHook{&trips}) }) // a round trip per node
			c = cc
		} else {
			c = redis.NewClient(&redis.Options{Addr: p.nodes[0], MaxRetries: -1, PoolSize: p.connsPerReplica,
				ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
			c.AddHook(tripHook{&trips})
		}
		clients[i] = c
		opts := []redisstore.Option{redisstore.WithPrefix(prefix)}
		if p.linger >= 0 {
			opts = append(opts, redisstore.WithLinger(p.linger))
		}
		if mode == "hybrid" {
			opts = append(opts, redisstore.WithHybrid(p.interval, p.maxLocal), redisstore.WithReplicas(r))
		} else if mode != "plain" {
			return res, fmt.Errorf("-modes: %q is not plain or hybrid", mode)
		}
		l, err := redisstore.New(c, cfg, opts...)
		if err != nil {
			return res, err
		}
		ls[i] = l
	}
	admin := make(admins, len(p.nodes))
	for i, a := range p.nodes {
		admin[i] = redis.NewClient(&redis.Options{Addr: a})
		defer admin[i].Close()
	}
	ctx := context.Background()
	for _, l := range ls { // loads the script on every node (a NOSCRIPT costs a call more), before the counts start
		for w := range 32 {
			if _, err := l.AllowN(ctx, "warmup"+strconv.Itoa(w), 0); err != nil {
				return res, err
			}
		}
	}
	if err := admin.resetStat(ctx); err != nil {
		return res, err
	}
	cpu0, err := admin.cpu(ctx)
	if err != nil {
		return res, err
	}
	trips.Store(0)
	per := max(1, p.callers/r)
	hot := make([]atomic.Int64, p.hot)
	var lat [][]time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(p.dur)
	for i, l := range ls {
		for g := range per {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				z := rand.NewZipf(rng, p.skew, 1, p.tenants-1)
				var mine []time.Duration
				var n, adm, errs, tn, tok int64
				for time.Now().Before(end) {
					key, h := "", -1
					if p.hot > 0 && rng.Float64() < p.hotShare {
						h = rng.IntN(p.hot)
						key = "hot" + strconv.Itoa(h)
					} else {
						key = "t" + strconv.FormatUint(z.Uint64(), 10)
					}
					t0 := time.Now()
					d, err := l.AllowN(ctx, key, 1)
					mine = append(mine, time.Since(t0))
					n++
					if err != nil {
						errs++
					}
					if h < 0 {
						tn++
					}
					if d.Allowed {
						adm++
						if h >= 0 {
							hot[h].Add(1)
						} else {
							tok++
						}
					}
				}
				mu.Lock()
				lat = append(lat, mine)
				res.decisions += n
				res.admitted += adm
				res.errors += errs
				res.tenants += tn
				res.tenantsOK += tok
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	for _, l := range ls {
		_ = l.Close() // the last flush: its calls are counted too
	}
	cpu1, err := admin.cpu(ctx)
	if err != nil {
		return res, err
	}
	res.cpu = cpu1 - cpu0
	res.trips = trips.Load()
	if res.scriptCalls, err = admin.scriptCalls(ctx); err != nil {
		return res, err
	}
	for _, c := range clients {
		_ = c.Close()
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	res.p50, res.p99 = quantile(all, 0.50), quantile(all, 0.99)
	for i := range hot {
		res.hotMax = max(res.hotMax, hot[i].Load())
	}
	return res, nil
}

// quantile of sorted samples (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

var (
	cpuRe  = regexp.MustCompile(`(?m)^used_cpu_(?:sys|user):([0-9.]+)`)
	callRe = regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`)
)

// admins has a client per server (a Cluster's masters).
type admins []*redis.Client

func (a admins) resetStat(ctx context.Context) error {
	for _, c := range a {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (a admins) cpu(ctx context.Context) (time.Duration, error) {
	var sum time.Duration
	for _, c := range a {
		d, err := redisCPU(ctx, c)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

func (a admins) scriptCalls(ctx context.Context) (int64, error) {
	var sum int64
	for _, c := range a {
		n, err := scriptCalls(ctx, c)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// redisCPU is the server's CPU time so far (INFO cpu: used_cpu_sys +
// used_cpu_user).
func redisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var s float64
	for _, m := range cpuRe.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		s += v
	}
	return time.Duration(s * float64(time.Second)), nil
}

// scriptCalls is EVALSHA + EVAL calls since CONFIG RESETSTAT.
func scriptCalls(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range callRe.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n, nil
}

// tripHook counts round trips: one per command sent alone, one per
// pipeline.
type tripHook struct{ n *atomic.Int64 }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// startServer starts redis-server on a free loopback port, without
// persistence, with extra arguments, and returns its address and a stop
// function.
func startServer(extra ...string) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (Debian: apt-get install redis-server), or give -redis: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "redisscale")
	if err != nil {
		return "", nil, err
	}
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
	addr := net.JoinHostPort("127.0.0.1", port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := waitFor(addr+" answering", func() bool { return c.Ping(context.Background()).Err() == nil }); err != nil {
		stop()
		return "", nil, err
	}
	return addr, stop, nil
}

// startCluster starts n cluster-enabled masters (n ≥ 3), joins them with
// redis-cli --cluster create, and returns their addresses once each
// reports cluster_state:ok, and a stop function.
func startCluster(n int) ([]string, func(), error) {
	var addrs []string
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	for range n {
		a, f, err := startServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			stop()
			return nil, nil, err
		}
		addrs, stops = append(addrs, a), append(stops, f)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		stop()
		return nil, nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		err := waitFor("cluster_state:ok on "+a, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = c.Close()
		if err != nil {
			stop()
			return nil, nil, err
		}
	}
	return addrs, stop, nil
}

// waitFor polls ok for up to 10 s (a server starting: not a verdict).
func waitFor(what string, ok func() bool) error {
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
