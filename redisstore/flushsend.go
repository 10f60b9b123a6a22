package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A flush's round trips. Every round trip runs in a goroutine of its own
// holding the token, so there is at most one at a time; the caller waits
// for it until the deadline and then gives up on it (the batch stays
// unconfirmed and is resent, which its sequence number makes safe). The
// goroutine ends when go-redis returns.

// send runs items as pipelines of at most maxPipeline, one round trip
// each, and stops at the first that fails. It returns the replies of the
// pipelines that came back (a prefix of items) and the failure, if any.
func (h *hybrid) send(items []flushItem, abort <-chan struct{}) ([]reply, error) {
	replies := make([]reply, 0, len(items))
	for i := 0; i < len(items); i += maxPipeline {
		r, err := h.exchange(items[i:min(i+maxPipeline, len(items))], abort)
		replies = append(replies, r...)
		if err != nil {
			return replies, err
		}
	}
	return replies, nil
}

// exchange runs one pipeline within the deadline. It waits for the token
// (a round trip given up on keeps it until go-redis returns), or for abort.
// A pipeline that does not come back in time is given up on: the error
// says so, and its goroutine ends when go-redis returns.
func (h *hybrid) exchange(items []flushItem, abort <-chan struct{}) ([]reply, error) {
	select {
	case h.token <- struct{}{}:
	case <-abort:
		return nil, errAborted
	}
	// Only this function cancels ctx, after the select: ctx.Done() in the
	// select then means the deadline and nothing else. Cancelling a
	// pipeline given up on also ends it early when the client has
	// ContextTimeoutEnabled.
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	type result struct {
		replies []reply
		err     error
	}
	done := make(chan result, 1)
	h.rts.Add(1)
	go func() {
		defer h.rts.Done()
		defer func() { <-h.token }()
		r, err := h.pipeline(ctx, items)
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		return r.replies, r.err
	case <-ctx.Done():
	}
	select { // a reply that came with the deadline is the truth
	case r := <-done:
		return r.replies, r.err
	default:
		return nil, errFlushDeadline{h.timeout}
	}
}

// errFlushDeadline is a flush's round trip given up at its deadline.
type errFlushDeadline struct{ d time.Duration }

func (e errFlushDeadline) Error() string {
	return fmt.Sprintf("redisstore: no reply within the flush deadline (%v)", e.d)
}

// pipeline sends items as one pipeline. The items that met NOSCRIPT did not
// run: the script is loaded once and they go again as one pipeline; those
// that meet it again (a SCRIPT FLUSH in between) go once more as EVAL,
// which cannot meet it.
func (h *hybrid) pipeline(ctx context.Context, items []flushItem) ([]reply, error) {
	l := h.l
	cmds := make([]*redis.Cmd, len(items))
	pipe := l.client.Pipeline()
	for i := range items {
		cmds[i] = h.flushCmd(ctx, pipe, &items[i], false)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	missing := noscripts(cmds, nil)
	replies := make([]reply, len(items))
	if len(missing) > 0 {
		l.noscript.Add(1)
		if err := script.Load(ctx, l.client).Err(); err != nil {
			for i := range replies {
				replies[i] = reply{err: err}
			}
			return replies, fmt.Errorf("redisstore: loading the script after NOSCRIPT: %w", err)
		}
		if h.afterLoad != nil {
			h.afterLoad()
		}
		for round := 0; len(missing) > 0 && round < 2; round++ {
			if round == 1 {
				l.noscript.Add(1)
			}
			pipe := l.client.Pipeline()
			for _, i := range missing {
				cmds[i] = h.flushCmd(ctx, pipe, &items[i], round == 1)
			}
			_, _ = pipe.Exec(ctx)
			missing = noscripts(cmds, missing[:0])
		}
	}
	var first error
	ok := false
	for i, c := range cmds {
		res, err := c.Result()
		replies[i] = reply{res: res, err: err}
		if err != nil && first == nil && !keyError(err) {
			first = err
		}
		ok = ok || err == nil
	}
	if ok {
		l.answered() // Redis answers (liveness.go)
	}
	return replies, first
}

// flushCmd queues one item's script call (EVALSHA, or EVAL if eval): add n
// unchecked, at most once per sequence number, and reply with the key's
// count.
func (h *hybrid) flushCmd(ctx context.Context, pipe redis.Pipeliner, it *flushItem, eval bool) *redis.Cmd {
	l := h.l
	rk := l.Key(it.key)
	keys := []string{rk}
	if it.seq != 0 {
		keys = append(keys, rk+":f:"+h.rid)
	}
	args := make([]any, 0, 9)
	args = append(args, it.n, it.limit)
	args = append(args, l.args...)
	args = append(args, "1", 0, it.seq)
	if eval {
		return script.Eval(ctx, pipe, keys, args...)
	}
	return script.EvalSha(ctx, pipe, keys, args...)
}
