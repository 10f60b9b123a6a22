package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// eval runs the script for one decision on the caller's goroutine and
// returns its decision and the Redis time it used. reserve is the units
// this replica admitted locally and has not recorded yet (hybrid mode):
// the check counts them, the write does not add them, and the returned
// Remaining does not subtract them. Decisions go through the batcher
// (batcher.do), which runs this for a lone call; tests call it directly.
func (l *Limiter) eval(ctx context.Context, key string, n, reserve int64) (engine.Decision, time.Time, error) {
	limit, _ := l.limitOf(key)
	return l.evalOne(ctx, l.client, key, n, limit, reserve)
}

func (l *Limiter) evalOne(ctx context.Context, c redis.Scripter, key string, n, limit, reserve int64) (engine.Decision, time.Time, error) {
	keys := []string{l.Key(key)}
	args := l.callArgs(n, limit, reserve)
	res, err := l.script().EvalSha(ctx, c, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Only an explicit NOSCRIPT: the script did not run, so nothing
		// was counted. EVAL loads it and runs it, once. A timeout is
		// never retried: the call may already have counted.
		l.noscript.Add(1)
		res, err = l.script().Eval(ctx, c, keys, args...).Result()
	}
	if err != nil {
		return engine.Decision{}, time.Time{}, err
	}
	return l.parse(res, limit)
}

// callArgs is a decision's ARGV (see luaSource).
func (l *Limiter) callArgs(n, limit, reserve int64) []any {
	if l.tb != nil {
		return l.tb.args(n, limit)
	}
	args := make([]any, 0, 8)
	args = append(args, n, limit)
	args = append(args, l.args...)
	if reserve != 0 {
		args = append(args, "0", reserve)
	}
	return args
}

func parse(res any, limit int64) (engine.Decision, time.Time, error) {
	a, ok := res.([]any)
	if !ok || len(a) != 4 {
		return engine.Decision{}, time.Time{}, fmt.Errorf("redisstore: unexpected script reply %v", res)
	}
	var v [4]int64
	for i := range a {
		x, ok := a[i].(int64)
		if !ok {
			return engine.Decision{}, time.Time{}, fmt.Errorf("redisstore: unexpected script reply %v", res)
		}
		v[i] = x
	}
	d := engine.Decision{Allowed: v[0] == 1, Limit: limit, Remaining: v[1], RetryAfter: time.Duration(v[2])}
	if v[2] < 0 {
		d.RetryAfter = engine.Never
	}
	return d, time.UnixMicro(v[3]), nil
}

// noscripts appends to dst the indexes of the calls that met NOSCRIPT.
func noscripts(cmds []*redis.Cmd, dst []int) []int {
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			dst = append(dst, i)
		}
	}
	return dst
}
