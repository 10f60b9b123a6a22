package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a failure state with three states:
//
//   - closed: decisions go to Redis;
//   - confirming: a round trip went unanswered (a suspicion, see
//     liveness.go), and a confirmation is judging whether Redis answers;
//     decisions still go to Redis, and callers whose own round trip failed
//     wait for its verdict;
//   - open: Redis is down (a proof, or a confirmed silence). Decisions are
//     the failure policy's, answered at once and without a round trip; a
//     goroutine probes Redis in the background, first minWait after the
//     failure, then at doubling intervals up to maxWait, and closes the
//     breaker on the first probe that succeeds. Only a real round trip
//     closes it: nothing else, in particular not the absence of work, does.
//
// The hybrid mode uses it with a probe that resends the batches its failed
// flush left unconfirmed; the plain mode with a probe that runs the script
// (plainbreaker.go). Both confirm with check, the script's round trip.
//
// The zero value is not usable; use newBreaker. It is safe for concurrent
// use. Its goroutines (the prober, a confirmation and its round trips) are
// started by trip and suspect, and end on their own or on stop, which
// waits for them.
type breaker struct {
	// open is nil while the breaker is closed or confirming. Else it
	// holds the error a policy answer returns (wrapping ErrUnavailable
	// and the last cause). Readers need only that one word: a decision
	// that loads nil just before a trip goes to Redis and meets the
	// failure itself.
	open atomic.Pointer[error]

	probe            func(abort <-chan struct{}) error
	minWait, maxWait time.Duration
	manual           bool   // tests: no prober goroutine, probes run by probeOnce
	onClose          func() // called by the probe that closed the breaker, if set; must not block

	// For confirmations (liveness.go); set before first use.
	check   func(ctx context.Context) error // one round trip that runs the script
	replies func() uint64                   // replies Redis gave so far, to any round trip; nil: only check's count
	// dialing counts the dials of check's connections in progress; nil
	// when check has no checker, whose connections judge a silence
	// themselves (checkconn.go): the ticks then judge every silence.
	dialing func() int64
	onDown  func(cause error)       // a confirmation found Redis down: count and report it, if set
	bg      context.Context         // check's parent, cancelled by Close
	budget  time.Duration           // the silence, in the process's own time, that is an outage (liveBudget)
	off     bool                    // WithBreaker(0, 0): verdicts for the callers waiting, but never open
	wrap    func(cause error) error // the cause as an open breaker's answer says it, if set
	onOpen  func()                  // called by the trip that opened the breaker, if set; must not block
	opens   *atomic.Uint64          // counts the openings, if set: before the open breaker is visible, so a caller that meets it finds it counted

	mu      sync.Mutex // guards the fields below, and orders trips against a probe's verdict
	gen     uint64     // trips so far: a probe closes the breaker only if no trip came during it
	probing bool       // the prober goroutine is running
	conf    *verdict   // the confirmation running, if any
	stopped bool
	stopCh  chan struct{}
	wg      sync.WaitGroup
}

func newBreaker(probe func(abort <-chan struct{}) error, minWait, maxWait time.Duration, manual bool) *breaker {
	return &breaker{probe: probe, minWait: minWait, maxWait: max(minWait, maxWait), manual: manual, stopCh: make(chan struct{}), bg: context.Background(), budget: confirmBudget}
}

// err returns nil while the breaker is closed or confirming, else the
// error for a policy answer.
func (b *breaker) err() error {
	if p := b.open.Load(); p != nil {
		return *p
	}
	return nil
}

// verdict is a confirmation's outcome, final once done is closed: down is
// nil if Redis answered (or the limiter closed first), else the cause of
// the outage.
type verdict struct {
	done chan struct{}
	down error
}

// decided returns a verdict that is final already.
func decided(down error) *verdict {
	v := &verdict{done: make(chan struct{}), down: down}
	close(v.done)
	return v
}

// wait waits for the verdict, or for abort; it reports whether the verdict
// came, and the cause of the outage if there is one.
func (v *verdict) wait(abort <-chan struct{}) (down error, ok bool) {
	select {
	case <-v.done:
		return v.down, true
	case <-abort:
		select { // both ready: the verdict is the truth
		case <-v.done:
			return v.down, true
		default:
			return nil, false
		}
	}
}

// trip opens the breaker with cause, or refreshes the cause if it is open,
// and starts the prober if it is not running; a confirmation in progress
// ends with cause as its verdict. It reports whether this call opened the
// breaker. An off breaker never opens: trip only gives the verdict.
func (b *breaker) trip(cause error) bool {
	if b.wrap != nil {
		cause = b.wrap(cause)
	}
	e := newTripError(cause)
	b.mu.Lock()
	if b.off {
		b.settle(b.conf, e)
		b.mu.Unlock()
		return false
	}
	opened := b.open.Load() == nil
	if opened && b.opens != nil {
		b.opens.Add(1)
	}
	b.open.Store(&e)
	b.gen++
	if !b.probing && !b.stopped && !b.manual {
		b.probing = true
		b.wg.Add(1)
		go b.run()
	}
	b.settle(b.conf, e) // after the store: a caller woken by the verdict finds the breaker open
	b.mu.Unlock()
	if opened && b.onOpen != nil {
		b.onOpen()
	}
	return opened
}

// suspect starts a confirmation, unless one is running (it joins it) or
// the breaker is open (the verdict is the open breaker's), and returns the
// verdict to wait for. After stop it starts none: the verdict is nil
// (nothing known).
func (b *breaker) suspect() *verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.open.Load(); p != nil {
		return decided(*p)
	}
	if b.conf != nil {
		return b.conf
	}
	if b.stopped {
		return decided(nil)
	}
	v := &verdict{done: make(chan struct{})}
	b.conf = v
	b.wg.Add(1)
	go b.confirm(v)
	return v
}

// settle gives v its verdict, if v is still the confirmation running.
// b.mu is held.
func (b *breaker) settle(v *verdict, down error) {
	if v == nil || b.conf != v {
		return
	}
	b.conf = nil
	v.down = down
	close(v.done)
}

// run is the prober goroutine.
func (b *breaker) run() {
	defer b.wg.Done()
	wait := b.minWait
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-b.stopCh:
			b.mu.Lock()
			b.probing = false
			b.mu.Unlock()
			return
		case <-t.C:
		}
		if b.probeOnce() {
			return
		}
		wait = min(2*wait, b.maxWait)
		t.Reset(wait)
	}
}

// probeOnce runs one probe. On success, and if no trip came while it ran,
// it closes the breaker, ends the prober's duty (probing = false) and
// returns true.
func (b *breaker) probeOnce() bool {
	b.mu.Lock()
	gen := b.gen
	b.mu.Unlock()
	err := b.probe(b.stopCh)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		e := newTripError(err)
		b.open.Store(&e)
		return false
	}
	if b.gen != gen {
		return false // a round trip failed while the probe ran: probe again
	}
	b.open.Store(nil)
	b.probing = false
	if b.onClose != nil {
		b.onClose()
	}
	return true
}

// stop ends the prober and any confirmation, and waits for them and their
// round trips (each is bounded). The breaker keeps its state; a verdict
// still pending is final, with nothing known (nil).
func (b *breaker) stop() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		close(b.stopCh)
	}
	b.settle(b.conf, nil)
	b.mu.Unlock()
	b.wg.Wait()
}

// tripError is a policy answer's error: ErrUnavailable, and the cause.
type tripError struct{ cause error }

// newTripError is the policy answer's error for cause, with any context
// error taken out of the chain (see backendCause).
func newTripError(cause error) error { return &tripError{cause: backendCause(cause)} }

func (e *tripError) Error() string {
	return ErrUnavailable.Error() + ": " + e.cause.Error()
}

func (e *tripError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// backendCause returns err for a policy answer's chain: err itself, or,
// if it wraps a context's error (a dial that timed out, a batch's
// deadline, another caller's context), an error with the same text that
// wraps no context error. A policy answer must never look like the end of
// the caller's own context, which a caller may test before ErrUnavailable.
func backendCause(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &causeText{err.Error()}
	}
	return err
}

// causeText is an error's text without its chain.
type causeText struct{ s string }

func (e *causeText) Error() string { return e.s }
