package redisstore

// Stats counts a Limiter's outcomes. Each decision is counted in exactly
// one of RedisDecisions, LocalDecisions, FallbackDecisions, CallerGone and
// NoReply,
// except a request refused without a round trip (n < 0, n above the key's
// limit, a refused KeyLimit answer, a key longer than Config.MaxKeyBytes),
// which is in none.
type Stats struct {
	// RedisDecisions: decisions answered by a script call. That is every
	// decision of a plain limiter. For a hybrid limiter it is the exact
	// ones: a key's first decision, a cost above maxLocal, a key this
	// replica decides exactly until its next flush returns, and every
	// decision after Close.
	RedisDecisions uint64
	// LocalDecisions: hybrid decisions answered in process from the key's
	// estimate, with no round trip.
	LocalDecisions uint64
	// FallbackDecisions: decisions answered by the failure policy, each
	// returned with an error wrapping ErrUnavailable.
	FallbackDecisions uint64
	// CallerGone: calls answered with nothing admitted because the
	// caller's context had ended, before the call or before Redis
	// answered it (a client that went away, a deadline that passed), each
	// returned with an error wrapping the context's error. They are the
	// caller's doing, not Redis's failures: they are not in Failures and
	// do not call the OnError hook (but see WithOnError).
	CallerGone uint64
	// NoReply: calls answered with nothing admitted because their round
	// trip got no answer while Redis answered others (a timeout of the
	// client's own on a process short of CPU, a connection killed
	// mid-call), each returned with an error wrapping ErrNoReply. Each is
	// in Failures too.
	NoReply uint64
	// Failures: round trips to Redis that failed, each passed to the
	// OnError hook once: a decision's script call, a cancel's, settle's or
	// charge's (reserve.go), a breaker probe, a hybrid flush, probe or last flush at Close (one per flush, however
	// many keys it carried, also when only some keys failed with
	// WRONGTYPE), and a confirmation that found Redis down (its check
	// refused or unanswered; one per confirmation), so that every
	// opening of the breaker is counted here even when every caller of
	// the round trips that raised it had gone. A decision's round trip whose caller's context ended
	// first is counted only if it failed with an error reply or a refused
	// connection.
	Failures uint64
	// NoScript: times the script was missing from Redis's cache (NOSCRIPT:
	// after SCRIPT FLUSH, a restart or a failover) and was loaded again,
	// one per decision or flush round trip that met it.
	NoScript uint64
	// Flushes: hybrid flushes that completed, Close's last one included
	// when it had units to send and Redis recorded them all; SlowFlushes:
	// those of the flusher's that took longer than half the interval, the
	// timing assumption of the hybrid bound's simple form (see WithHybrid).
	Flushes, SlowFlushes uint64
	// LostUnits: units a hybrid limiter admitted locally that it cannot
	// show to be in Redis and will not send again: a batch still
	// unconfirmed one Window after it was taken (an outage), a batch for
	// a key Redis answered WRONGTYPE for (another client wrote there), or
	// the units Close could not record.
	LostUnits uint64
	// BreakerOpens: times the breaker opened after a failed round trip
	// (see WithBreaker), or a hybrid limiter entered its failure state.
	// The decisions answered while it was open are in FallbackDecisions.
	BreakerOpens uint64
	// CancelErrors: Cancels, and Settles to fewer or equal units than
	// reserved, that Redis did not apply or may not have (a failed round
	// trip, an open breaker), each returned wrapping ErrNotApplied and
	// passed to the OnError hook: their units count until their
	// sub-window leaves the window (a Settle to equal units changes
	// nothing; only its Decision is lost). ChargeErrors: the same for
	// ChargeN (n = 0 too) and Settles to more units, whose units may go
	// uncounted. A failed round trip is in Failures too.
	CancelErrors, ChargeErrors uint64
}

// Stats returns the counters so far. Each is read separately, so they need
// not be mutually consistent while decisions run.
func (l *Limiter) Stats() Stats {
	return Stats{
		RedisDecisions:    l.redisDecisions.Load(),
		LocalDecisions:    l.localDecisions.Load(),
		FallbackDecisions: l.fallbacks.Load(),
		CallerGone:        l.callerGone.Load(),
		NoReply:           l.noReply.Load(),
		Failures:          l.failures.Load(),
		NoScript:          l.noscript.Load(),
		Flushes:           l.flushes.Load(),
		SlowFlushes:       l.slowFlushes.Load(),
		LostUnits:         l.lostUnits.Load(),
		BreakerOpens:      l.breakerOpens.Load(),
		CancelErrors:      l.cancelErrors.Load(),
		ChargeErrors:      l.chargeErrors.Load(),
	}
}
