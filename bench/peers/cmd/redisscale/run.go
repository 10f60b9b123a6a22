package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/bench/peers"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
)

// One run: R replicas under the load, and its row of the table.

type result struct {
	decisions, admitted int64
	tenants, tenantsOK  int64 // decisions on tenants' keys (not the hot keys), and those admitted
	elapsed             time.Duration
	p50, p99            time.Duration
	scriptCalls, trips  int64
	cpu                 time.Duration // the servers' CPU time (INFO cpu)
	inScripts           time.Duration // the scripts' run time (INFO commandstats' usec: wall time)
	clientCPU           time.Duration // this process's CPU time: the replicas, their clients and the callers
	hotMax              int64
	errors              int64
}

// metrics are a run's figures per decision, as its row gives them.
type metrics struct {
	rate, p50, p99, calls, trips, cpu, scripts, client, tenantsOK float64 // p50, p99 and the CPU times in µs
	hotMax, errors                                                int64
}

func (res result) metrics() metrics {
	d := float64(res.decisions)
	us := func(x time.Duration) float64 { return float64(x) / float64(time.Microsecond) }
	return metrics{
		rate: d / res.elapsed.Seconds(), p50: us(res.p50), p99: us(res.p99),
		calls: float64(res.scriptCalls) / d, trips: float64(res.trips) / d,
		cpu: us(res.cpu) / d, scripts: us(res.inScripts) / d, client: us(res.clientCPU) / d,
		tenantsOK: 100 * float64(res.tenantsOK) / float64(max(1, res.tenants)),
		hotMax:    res.hotMax, errors: res.errors,
	}
}

// median is each figure's median over runs (taken figure by figure, so
// one row's figures may come from different runs), except the hot key's
// most admitted and the errors, which are the largest of the runs.
func median(ms []metrics) metrics {
	med := func(f func(metrics) float64) float64 {
		v := make([]float64, len(ms))
		for i, m := range ms {
			v[i] = f(m)
		}
		return peers.Median(v)
	}
	out := metrics{
		rate: med(func(m metrics) float64 { return m.rate }), p50: med(func(m metrics) float64 { return m.p50 }),
		p99: med(func(m metrics) float64 { return m.p99 }), calls: med(func(m metrics) float64 { return m.calls }),
		trips: med(func(m metrics) float64 { return m.trips }), cpu: med(func(m metrics) float64 { return m.cpu }),
		scripts: med(func(m metrics) float64 { return m.scripts }), client: med(func(m metrics) float64 { return m.client }),
		tenantsOK: med(func(m metrics) float64 { return m.tenantsOK }),
	}
	for _, m := range ms {
		out.hotMax, out.errors = max(out.hotMax, m.hotMax), max(out.errors, m.errors)
	}
	return out
}

func (m metrics) row(p params, mode string, r int) string {
	bound := "—"
	if mode == "hybrid" {
		bound = strconv.FormatInt(hybridBound(p.hotLimit, p.maxLocal, r), 10)
	}
	errs := ""
	if m.errors > 0 {
		errs = fmt.Sprintf(" (%d errors)", m.errors)
	}
	lat := func(us float64) time.Duration {
		return time.Duration(us * float64(time.Microsecond)).Round(time.Microsecond)
	}
	return fmt.Sprintf("| %s | %d | %.0f%s | %v | %v | %.3f | %.3f | %.1f µs | %.1f µs | %.1f µs | %.1f | %d (%d, %s) |",
		mode, r, m.rate, errs, lat(m.p50), lat(m.p99), m.calls, m.trips, m.cpu, m.scripts, m.client,
		m.tenantsOK, m.hotMax, p.hotLimit, bound)
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
	client0 := peers.CPUTime()
	per := max(1, p.callers/r)
	var period time.Duration // -rate: each caller's time between calls
	if p.rate > 0 {
		period = time.Duration(float64(r*per) / p.rate * float64(time.Second))
	}
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
				next := start.Add(time.Duration(rng.Int64N(int64(max(1, period))))) // callers out of step
				for time.Now().Before(end) {
					if period > 0 {
						// Paced: the call starts at its slot, or at once
						// when behind (the latency is the call's own).
						if wait := time.Until(next); wait > 0 {
							time.Sleep(wait)
						}
						next = next.Add(period)
					}
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
	res.clientCPU = peers.CPUTime() - client0
	cpu1, err := admin.cpu(ctx)
	if err != nil {
		return res, err
	}
	res.cpu = cpu1 - cpu0
	res.trips = trips.Load()
	if res.scriptCalls, res.inScripts, err = admin.scriptCalls(ctx); err != nil {
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
