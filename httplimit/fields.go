package httplimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Fields computes the values of the RateLimit and RateLimit-Policy fields
// (see HeadersDraft) exactly as a Middleware does, for adapters that carry
// them over another protocol: grpclimit sends them as gRPC response
// metadata. A Middleware writes its own fields with the same parts (the
// policy text, the policy cache, appendRate and the admitted bound), so
// the two cannot drift apart.
//
// Fields is safe for concurrent use and must not be copied after first
// use. The zero Fields is not usable; build one with NewFields.
type Fields struct {
	text     policyText
	admitted int64 // t= of an admitted response, or −1 to omit it; FixedWindow: see fixed
	fixed    int64 // FixedWindow's Window in ns, whose reset is computed per response; 0 otherwise
	clk      engine.Clock
	values   policyCache
}

// NewFields returns the Fields of NewMiddleware(l, WithPolicy(name,
// window)): the same rules for name (1 … 64 printable ASCII characters,
// quotes and backslashes escaped) and window (0 takes the limiter's; a
// non-zero one must equal it), and the same errors. l is the limiter the
// values describe; only its Config method is read (Configured), once,
// here. A limiter without one (or a nil l) gets w= from window, and
// AdmittedReset is −1.
func NewFields(l any, name string, window time.Duration) (*Fields, error) {
	c := defaultConfig()
	if err := WithPolicy(name, window)(&c); err != nil {
		return nil, err
	}
	f := &Fields{}
	if isNil(l) {
		l = nil
	}
	if err := errors.Join(f.init("NewFields", l, c.policyName, c.window)...); err != nil {
		return nil, err
	}
	return f, nil
}

// init resolves the window and the admitted bound from l (if it is
// Configured) and the WithPolicy window, and builds the constant text.
// name is already validated and escaped; fn names the caller in errors.
func (f *Fields) init(fn string, l any, name string, window time.Duration) []error {
	var errs []error
	f.admitted = -1
	if c, ok := l.(Configured); ok {
		lc := c.Config()
		if lc.Window <= 0 {
			errs = append(errs, fmt.Errorf("httplimit: %s: the limiter's Config().Window = %v, want > 0", fn, lc.Window))
		} else if window != 0 && window != lc.Window {
			errs = append(errs, fmt.Errorf("httplimit: WithPolicy window = %v, but the limiter's Config().Window = %v; pass 0 to take the limiter's", window, lc.Window))
		}
		window = lc.Window
		f.admitted = ceilSeconds(admittedReset(lc))
		if lc.Algorithm == engine.FixedWindow && lc.Window > 0 {
			f.fixed, f.clk = int64(lc.Window), lc.Clock
		}
	}
	f.text = newPolicyText(name, window)
	return errs
}

// Policy returns the RateLimit-Policy member for a key whose limit is
// limit: "name";q=<limit>;w=<window seconds>, without w= when the window
// is unknown or not a whole number of seconds (see Middleware). It is
// built once per limit and cached; the same string is returned again.
func (f *Fields) Policy(limit int64) string { return f.values.get(limit, &f.text).policy }

// RateLimit returns the RateLimit member "name";r=<remaining>;t=<reset>.
// A negative remaining is written as 0; reset < 0 leaves t= out. A
// Middleware writes, and an adapter should write:
//
//   - admitted (engine.ReasonOK): reset = AdmittedReset();
//   - limited (engine.ReasonLimited): reset = RetrySeconds(d.RetryAfter),
//     the value of Retry-After;
//   - a cost above the limit (engine.ReasonNever with n > Limit): reset
//     −1;
//   - refused by MaxKeys (engine.ReasonKeysFull), or by a failed
//     ContextLimiter: no member at all, since the key has no state or the
//     backend could not say.
func (f *Fields) RateLimit(remaining, reset int64) string {
	var buf [2*maxPolicyName + 48]byte
	return string(f.appendRate(buf[:0], remaining, reset))
}

// AdmittedReset returns the t= of an admitted response now, in seconds: a
// true upper bound on when the key's whole quota is free again (see
// Middleware), or −1 when the limiter does not report its Config.
func (f *Fields) AdmittedReset() int64 {
	if f.fixed == 0 {
		return f.admitted
	}
	return f.fixedReset()
}

// fixedReset is the time from now to the end of the Unix-aligned
// FixedWindow that holds now, rounded up to whole seconds: exactly when
// the units admitted now stop counting. now is read from the limiter's
// Config().Clock, or the wall clock when it has none (an engine with
// CoarseClock reads a clock up to one CoarseClock period behind the wall
// clock; the rounding up covers that, except near a whole second). The
// window end is at most now + Window ≤ 2262 + 2^60 ns, inside int64.
func (f *Fields) fixedReset() int64 {
	var now int64
	if f.clk != nil {
		now = f.clk.UnixNano()
	} else {
		now = time.Now().UnixNano()
	}
	end := (now/f.fixed + 1) * f.fixed
	return ceilSeconds(time.Duration(end - now))
}

// appendRate appends the RateLimit member to b (see RateLimit).
func (f *Fields) appendRate(b []byte, remaining, reset int64) []byte {
	b = append(b, f.text.ratePre...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	if reset >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
	}
	return b
}

// RetrySeconds returns d rounded up to whole seconds, at least 1: the
// Retry-After value, and the t= of a denial, that a Middleware writes for
// a wait of d. A wait of engine.Never gives the largest int64 seconds.
func RetrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }
