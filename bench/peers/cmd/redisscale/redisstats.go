package main

import (
	"context"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// What Redis says a run cost: its CPU time and script calls, and the round
// trips the replicas' clients made.

var (
	cpuRe  = regexp.MustCompile(`(?m)^used_cpu_(?:sys|user):([0-9.]+)`)
	callRe = regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+),usec=(\d+)`)
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

func (a admins) scriptCalls(ctx context.Context) (calls int64, inScripts time.Duration, err error) {
	for _, c := range a {
		n, d, err := scriptCalls(ctx, c)
		if err != nil {
			return 0, 0, err
		}
		calls += n
		inScripts += d
	}
	return calls, inScripts, nil
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

// scriptCalls is EVALSHA + EVAL calls since CONFIG RESETSTAT, and the time
// the server spent running them (commandstats' usec): the rest of its CPU
// time is reading, parsing and answering the round trips.
func scriptCalls(ctx context.Context, c *redis.Client) (int64, time.Duration, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	var n, us int64
	for _, m := range callRe.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		u, _ := strconv.ParseInt(m[2], 10, 64)
		n += v
		us += u
	}
	return n, time.Duration(us) * time.Microsecond, nil
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
