package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A sender's round trip: the calls of one batch as one EVALSHA or one
// pipeline, and their replies handed back by position.

// send claims the calls whose callers still wait and sends them as one
// round trip, and returns how many it sent. Its context has the latest of their deadlines, when every
// one has a deadline (with ContextTimeoutEnabled, go-redis gives up then;
// without it, the client's own timeouts bound the round trip, and the
// callers have returned by their deadlines anyway).
func (b *batcher) send(batch []*call) int {
	live := batch[:0]
	var latest time.Time
	bounded := true
	for _, c := range batch {
		if !c.state.CompareAndSwap(queued, sent) {
			continue // abandoned: never sent
		}
		// A call queued before the breaker opened (while the round trips
		// that opened it hung) is not sent into the outage: its caller
		// gets the policy's answer now, as it would have at AllowN's entry.
		if err := b.l.breakerErr(context.Background(), c.key); err != nil {
			c.done <- result{err: &heldError{err}}
			continue
		}
		live = append(live, c)
		if c.deadline.IsZero() {
			bounded = false
		} else if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if len(live) == 0 {
		return 0
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	l := b.l
	b.rounds.Add(1)
	slot := b.begin()
	if len(live) == 1 {
		c := live[0]
		d, at, err := l.evalOne(ctx, l.client, c.key, c.n, c.limit, c.reserve)
		b.end(slot)
		var v *verdict
		if err != nil {
			v = l.judge(ctx, c.key, err)
			err = &judgedError{mayHaveCounted(ctx, err), v}
		} else {
			l.answered() // also when its caller has given up: Redis answers
		}
		c.done <- result{d, at, err}
		b.await(v)
		return 1
	}
	b.piped.Add(1)
	cmds := make([]*redis.Cmd, len(live))
	pipe := l.client.Pipeline()
	for i, c := range live {
		cmds[i] = l.script().EvalSha(ctx, pipe, []string{l.Key(c.key)}, l.callArgs(c.n, c.limit, c.reserve)...)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	// The calls that met NOSCRIPT did not run: send them again, as one
	// pipeline whose first command is an EVAL, which loads the script, and
	// the others EVALSHA (one script body on the wire, not one per call).
	// Those that still meet NOSCRIPT (another node of a cluster, or a
	// SCRIPT FLUSH in between) go once more, all as EVAL, which cannot
	// meet it. Nothing else is ever resent.
	for round := 0; round < 2; round++ {
		var missing []int
		for i, cmd := range cmds {
			if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			break
		}
		l.noscript.Add(1)
		pipe := l.client.Pipeline()
		for j, i := range missing {
			c := live[i]
			keys, args := []string{l.Key(c.key)}, l.callArgs(c.n, c.limit, c.reserve)
			if j == 0 || round == 1 {
				cmds[i] = l.script().Eval(ctx, pipe, keys, args...)
			} else {
				cmds[i] = l.script().EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	b.end(slot)
	for _, cmd := range cmds {
		if cmd.Err() == nil {
			l.answered() // before the failures are judged: Redis answers
			break
		}
	}
	var verdicts []*verdict
	for i, c := range live {
		res, err := cmds[i].Result()
		var r result
		if err != nil {
			v := l.judge(ctx, c.key, err)
			if v != nil && (len(verdicts) == 0 || verdicts[len(verdicts)-1] != v) {
				verdicts = append(verdicts, v)
			}
			r.err = &judgedError{mayHaveCounted(ctx, err), v}
		} else {
			r.d, r.at, r.err = l.parse(res, c.limit)
		}
		c.done <- r
	}
	for _, v := range verdicts {
		b.await(v)
	}
	return len(live)
}

// await holds a sender's slot until v, if any, is final (or Close), so
// that the calls queued behind a failed round trip are held if Redis is
// down rather than sent into the outage, and sent if it answers.
func (b *batcher) await(v *verdict) {
	if v != nil {
		v.wait(b.l.bg.Done())
	}
}
