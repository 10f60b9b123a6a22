package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Telling a silent Redis from a busy process (docs/design.md §10). A round
// trip that gets no reply in time says nothing by itself: on a process
// short of CPU, a reply can wait in the socket, or its goroutine in the
// run queue, for hundreds of milliseconds while every timer fires on time.
// So a failure is sorted by what it shows:
//
//   - a proof: Redis or its host said no (an error reply, a refused
//     connection, a closed client). The breaker opens at once.
//   - a suspicion: no reply (a timeout of the client's own, a flush's
//     deadline, a caller's deadline while round trips have gone
//     unanswered for suspectAfter) or a connection lost mid-call. It
//     starts a confirmation, and decisions keep going to Redis meanwhile.
//     A call that got no connection from the client's pool is no evidence
//     (the application may hold the pool): it only starts a confirmation.
//   - nothing: a call that was never sent, or a caller's cancellation.
//
// A confirmation, one per node (a ClusterClient's master, a Ring's shard,
// or the one server), sends the script (check) on the node's checker, a
// connection of the limiter's own (client.go), not in the client's pool
// (unless that connection is lost as it is made: Redis at maxclients;
// see check). Any reply of the node ends it: Redis answers. That is the
// check's, or with a client of one server any round trip's (another
// node's says nothing of this one); a handshake is none (HELLO is no
// write: CLIENT PAUSE WRITE answers it). An error reply or a refused
// connection ends it as an outage. A silence is judged where a busy
// process cannot fake it: the check's connection (checkconn.go) waits
// for the reply until the budget (the client's ReadTimeout, at least
// confirmBudget: liveBudget) has passed since the check was written, then,
// once its goroutine has the CPU again, reads the socket once more; only
// if no reply is waiting then is the silence an outage. A deadline that
// fired while the goroutine waited in the run queue, behind a flood,
// shows nothing: the reply is in the socket by then. Two silences have
// no check written to judge them: a dial that gets no answer (a path
// that drops packets), and connections lost faster than the budget
// (killed every 50 ms, say). Those the ticks judge: confirmTick apart,
// each credited at most 2 × confirmTick however late it fires, so time
// the process spent without the CPU counts for little; after the budget
// of credited time, two passes of the scheduler's global run queue
// (runtime.Gosched, one tick apart), and only if no reply came then
// either is the silence an outage. A check with no checker (a client of
// another type) is judged by the ticks alone.
const (
	// suspectAfter: a caller's deadline that passes during its call is a
	// suspicion only when round trips have gone unanswered this long
	// (see stalled): a server slower than one caller's budget, answering
	// others, is not suspected at all.
	suspectAfter = 100 * time.Millisecond
	// confirmBudget is the least time, in the process's own time, Redis
	// may leave every round trip unanswered before the silence is an
	// outage; the budget is the client's ReadTimeout when longer
	// (liveBudget): a pause or a round trip shorter than that (a fork, a
	// slow command, a distant server) is ridden out.
	confirmBudget = 250 * time.Millisecond
	// confirmTick is the confirmation's clock; a tick is credited at most
	// twice its length.
	confirmTick = 10 * time.Millisecond
)

// evidence is what a failed round trip shows about Redis.
type evidence int

const (
	noEvidence evidence = iota // never sent, or the caller's own doing
	suspicion                  // no reply, or the connection lost: confirm
	proof                      // Redis or its host refused: down
)

// classify sorts a round trip's error, as far as the error alone can
// tell (the caller's context is judge's business).
func classify(err error) evidence {
	var re redis.Error
	switch {
	case err == nil, errors.Is(err, errAbandoned), keyError(err):
		return noEvidence
	case errors.As(err, &re), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, redis.ErrClosed):
		return proof
	}
	return suspicion
}

// confirm is a confirmation's goroutine: it judges v (see above) and ends
// when v is final.
func (b *breaker) confirm(v *verdict) {
	defer b.wg.Done()
	var seen uint64
	if b.replies != nil {
		seen = b.replies()
	}
	var answered atomic.Bool   // a check got its reply
	res := make(chan error, 1) // the result of the check in flight; one at a time
	send := func() {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			ctx, cancel := context.WithTimeout(b.bg, 2*b.budget) // the ticks judge; this bounds the round trip
			defer cancel()
			err := b.check(ctx)
			if err == nil {
				answered.Store(true)
			}
			res <- err
		}()
	}
	// A check's connection lost (killed, say) is replaced by the next
	// check's, whose handshake is no reply: HELLO is no write, and CLIENT
	// PAUSE WRITE answers it. Connections killed faster than a check's
	// budget would never let a check's connection judge its silence, so
	// after a loss the ticks judge it too: a busy process loses no
	// connection, and a check on a healthy Redis gets its reply within a
	// tick or two of being resent.
	lost := false
	replied := func() bool {
		return answered.Load() || b.replies != nil && b.replies() != seen
	}
	send()
	tick := time.NewTicker(confirmTick)
	defer tick.Stop()
	last := time.Now()
	var credited time.Duration
	passes, resend := 0, false
	for {
		var down error
		select {
		case <-v.done: // a trip gave the verdict, or stop
			return
		case err := <-res:
			switch {
			case err == nil:
			case classify(err) == proof, silent(err): // a refusal, or a silence the check's connection confirmed (checkconn.go)
				down = err
			default: // a timeout, a lost connection: send another on the next tick (one that fails at once must not spin)
				if lostConn(err) {
					lost = true
				}
				resend = true
			}
		case <-tick.C:
			now := time.Now() // when this goroutine runs, not when the tick was due
			credited += min(now.Sub(last), 2*confirmTick)
			last = now
			if resend {
				resend = false
				send()
			}
			// With a checker, its connection judges the silence of a
			// check once sent (checkconn.go); the ticks judge only a
			// dial that gets no answer, and connections lost (above).
			judged := b.dialing == nil || b.dialing() > 0 || lost
			if judged && credited >= b.budget && !replied() {
				if passes == 2 {
					down = fmt.Errorf("no reply from Redis for %v of this process's own time, to a check on a connection of the limiter's own or to any other round trip", b.budget)
				} else {
					passes++
					runtime.Gosched() // behind the goroutines woken for replies already in the socket
				}
			}
		}
		switch {
		case replied():
			b.decide(v, nil)
			return
		case down != nil:
			b.decide(v, down)
			return
		}
	}
}

// decide gives a confirmation's verdict: Redis answers (down nil), or an
// outage, which trips the breaker.
func (b *breaker) decide(v *verdict, down error) {
	if down != nil {
		if b.onDown != nil {
			b.onDown(down)
		}
		b.trip(down)
		return
	}
	b.mu.Lock()
	b.settle(v, nil)
	b.mu.Unlock()
}
