package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a failure state: closed while Redis answers, open from a failed
// round trip until a probe succeeds. While it is open, decisions are the
// failure policy's, answered at once and without a round trip; a goroutine
// probes Redis in the background, first minWait after the failure, then at
// doubling intervals up to maxWait, and closes the breaker on the first
// probe that succeeds. Only a real round trip closes it: nothing else, in
// particular not the absence of work, does.
//
// The hybrid mode uses it with a probe that resends the batches its failed
// flush left unconfirmed; the plain mode with a probe that runs the script
// (plainbreaker.go). It depends only on the probe function.
//
// The zero value is not usable; use newBreaker. It is safe for concurrent
// use. Its goroutine is started by trip and ends on a successful probe or
// on stop, which waits for it.
type breaker struct {
	// open is nil while the breaker is closed. Else it holds the error a
	// policy answer returns (wrapping ErrUnavailable and the last cause).
	// Readers need only that one word: a decision that loads nil just
	// before a trip goes to Redis and meets the failure itself.
	open atomic.Pointer[error]

	probe            func(abort <-chan struct{}) error
	minWait, maxWait time.Duration
	manual           bool   // tests: no goroutine, probes run by probeOnce
	onClose          func() // called by the probe that closed the breaker, if set; must not block

	mu      sync.Mutex // guards the fields below, and orders trips against a probe's verdict
	gen     uint64     // trips so far: a probe closes the breaker only if no trip came during it
	probing bool       // the prober goroutine is running
	stopped bool
	stopCh  chan struct{}
	wg      sync.WaitGroup
}

func newBreaker(probe func(abort <-chan struct{}) error, minWait, maxWait time.Duration, manual bool) *breaker {
	return &breaker{probe: probe, minWait: minWait, maxWait: max(minWait, maxWait), manual: manual, stopCh: make(chan struct{})}
}

// err returns nil while the breaker is closed, else the error for a policy
// answer.
func (b *breaker) err() error {
	if p := b.open.Load(); p != nil {
		return *p
	}
	return nil
}

// trip opens the breaker with cause, or refreshes the cause if it is open,
// and starts the prober if it is not running. It reports whether this call
// opened it.
func (b *breaker) trip(cause error) bool {
	e := error(&tripError{cause: cause})
	b.mu.Lock()
	defer b.mu.Unlock()
	opened := b.open.Load() == nil
	b.open.Store(&e)
	b.gen++
	if !b.probing && !b.stopped && !b.manual {
		b.probing = true
		b.wg.Add(1)
		go b.run()
	}
	return opened
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
		e := error(&tripError{cause: err})
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

// stop ends the prober and waits for it; a probe in flight first returns
// (its round trip is bounded). The breaker keeps its state.
func (b *breaker) stop() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		close(b.stopCh)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// tripError is a policy answer's error: ErrUnavailable, and the cause.
type tripError struct{ cause error }

func (e *tripError) Error() string {
	return ErrUnavailable.Error() + ": " + e.cause.Error()
}

func (e *tripError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }
