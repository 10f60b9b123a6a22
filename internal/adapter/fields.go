package adapter

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// MaxPolicyName bounds a policy name, so that a field value built from it
// fits a caller's stack buffer.
const MaxPolicyName = 64

// PolicyName validates a WithPolicyName name (1 … MaxPolicyName printable
// ASCII characters) and returns it escaped for a Structured Field String.
// prefix starts the error ("httplimit: ").
func PolicyName(prefix, name string) (string, error) {
	if len(name) == 0 || len(name) > MaxPolicyName {
		return "", fmt.Errorf("%sWithPolicyName name = %s, want 1 … %d printable ASCII characters", prefix, untrusted.Quote(name), MaxPolicyName)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "", fmt.Errorf("%sWithPolicyName name = %s has byte %#x at %d, want printable ASCII (0x20 … 0x7e)", prefix, untrusted.Quote(name), name[i], i)
		}
	}
	return escapeName(name), nil
}

// escapeName escapes quotes and backslashes for a Structured Field String.
func escapeName(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Fields computes the values of the RateLimit and RateLimit-Policy fields
// of draft-ietf-httpapi-ratelimit-headers-09 for one policy: httplimit
// writes them as HTTP fields, grpclimit as response metadata, from the
// same parts, so that the two cannot drift apart.
//
// Fields is safe for concurrent use and must not be copied after first
// use. The zero Fields is not usable; build one with NewFields.
type Fields struct {
	text     policyText
	admitted int64 // t= of an admitted response, or −1 to omit it; FixedWindow: see fixed; TokenBucket: see bucket
	fixed    int64 // FixedWindow's Window in ns, whose reset is computed per response; 0 otherwise
	clk      engine.Clock
	bucket   bucketShape // a TokenBucket limiter's, whose reset depends on Remaining; zero otherwise
	values   policyCache
}

// bucketShape is what a TokenBucket's fields are computed from: q = burst,
// w = the time to refill from empty, burst·window/limit.
type bucketShape struct{ burst, limit, window int64 }

// fill returns ⌈units·window/limit⌉ ns, the time units take to refill
// (units ≤ burst: at most the refill time, ≤ MaxWindow).
func (b bucketShape) fill(units int64) time.Duration {
	if units <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(units), uint64(b.window))
	q, r := bits.Div64(hi, lo, uint64(b.limit)) // hi < limit: the product over limit is ≤ 2^60
	if r != 0 {
		q++
	}
	return time.Duration(q)
}

// NewFields returns the Fields of a policy named name (validated and
// escaped by PolicyName) over limiter l with the WithPolicyName window: 0
// takes the limiter's; a non-zero one must equal it. l is read once, here,
// through its Config method (Configured); a limiter without one (or a nil
// l) gets w= from window, and AdmittedReset is −1. fn names the caller in
// errors, after prefix.
func NewFields(prefix, fn string, l any, name string, window time.Duration) (*Fields, error) {
	if err := CheckPolicy(prefix, name, window); err != nil {
		return nil, err
	}
	name = escapeName(name)
	f := &Fields{admitted: -1}
	var errs []error
	if c, ok := l.(Configured); ok && !IsNil(l) {
		lc := c.Config()
		if lc.Window <= 0 {
			errs = append(errs, fmt.Errorf("%s%s: the limiter's Config().Window = %v, want > 0", prefix, fn, lc.Window))
		} else if window != 0 && window != lc.Window {
			errs = append(errs, fmt.Errorf("%sWithPolicyName window = %v, but the limiter's Config().Window = %v; pass 0 to take the limiter's", prefix, window, lc.Window))
		}
		window = lc.Window
		f.admitted = ceilSeconds(admittedReset(lc))
		if lc.Algorithm == engine.FixedWindow && lc.Window > 0 {
			f.fixed, f.clk = int64(lc.Window), lc.Clock
		}
		if lc.Algorithm == engine.TokenBucket && lc.Window > 0 && lc.Limit > 0 && lc.Burst > 0 {
			// w= is the time to refill the bucket from empty, and only
			// when it is whole seconds exactly (newPolicyText).
			f.bucket = bucketShape{burst: lc.Burst, limit: lc.Limit, window: int64(lc.Window)}
			window = f.bucket.fill(lc.Burst)
			if hi, lo := bits.Mul64(uint64(lc.Burst), uint64(lc.Window)); hi != 0 || lo%uint64(lc.Limit) != 0 {
				window = 0 // not whole ns, so not whole seconds: no w=
			}
		}
	}
	f.text = newPolicyText(name, window)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

// policyText holds the constant parts of a policy's field values.
type policyText struct {
	policyPre string // `"name";q=`
	policySuf string // `;w=10`, or "" when the window has no w=
	ratePre   string // `"name";r=`
}

// newPolicyText builds the constant parts. w= is there only for a window
// of whole seconds: the draft's w is whole seconds, and rounding a 100 ms
// window up to w=1 would advertise a rate ten times lower than the real
// one; scaling q instead would make q disagree with r, which counts units
// of the real window.
func newPolicyText(name string, window time.Duration) policyText {
	t := policyText{policyPre: `"` + name + `";q=`, ratePre: `"` + name + `";r=`}
	if window > 0 && window%time.Second == 0 {
		t.policySuf = ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return t
}

// PolicyValue is the RateLimit-Policy value (and the X-RateLimit-Limit
// value) for one limit.
type PolicyValue struct {
	limit  int64
	Policy string
	XLimit string
}

// policySlots is the size of the policy cache. A server sees few distinct
// limits (one, or one per tier); eight direct-mapped slots hold them
// without a lock, and a miss costs what building the value costs anyway.
const policySlots = 8

// policyCache maps a limit to its PolicyValue. A slot's pointer is
// replaced whole: the Store of a fully built value synchronizes before
// any Load that observes it, so a reader sees either an old complete value
// (whose limit it checks) or the new one, never a partial one.
type policyCache [policySlots]atomic.Pointer[PolicyValue]

// Value returns the cached values for limit, building them on a miss.
func (f *Fields) Value(limit int64) *PolicyValue {
	slot := &f.values[uint64(limit)%policySlots]
	if p := slot.Load(); p != nil && p.limit == limit {
		return p
	}
	l := strconv.FormatInt(limit, 10)
	p := &PolicyValue{limit: limit, Policy: f.text.policyPre + l + f.text.policySuf, XLimit: l}
	slot.Store(p)
	return p
}

// Policy returns the RateLimit-Policy member for limit:
// "name";q=<limit>;w=<window seconds>.
func (f *Fields) Policy(limit int64) string { return f.Value(limit).Policy }

// RateLimit returns the RateLimit member "name";r=<remaining>;t=<reset>.
// A negative remaining is written as 0; reset < 0 leaves t= out. The
// adapters write, for a Decision d:
//
//   - admitted: reset = AdmittedReset();
//   - limited: reset = RetrySeconds(d.RetryAfter), the Retry-After value;
//   - a cost above the limit: reset −1;
//   - refused by MaxKeys, or by a failed ContextLimiter: no member at all,
//     since the key has no state or the backend could not say.
func (f *Fields) RateLimit(remaining, reset int64) string {
	var buf [2*MaxPolicyName + 48]byte
	return string(f.AppendRate(buf[:0], remaining, reset))
}

// AppendRate appends the RateLimit member to b (see RateLimit).
func (f *Fields) AppendRate(b []byte, remaining, reset int64) []byte {
	b = append(b, f.text.ratePre...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	if reset >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
	}
	return b
}

// AdmittedReset returns the t= of an admitted response now, in seconds: a
// true upper bound on when the key's whole quota is free again, or −1 when
// the limiter does not report its Config. It bounds the units recorded by
// now; a debt charged later (a settle after the handler) is not in it.
// remaining is the admitted Decision's: a TokenBucket is full again at most
// (Burst − remaining)·Window/Limit later; the other algorithms ignore it.
func (f *Fields) AdmittedReset(remaining int64) int64 { return f.AdmittedResetAt(0, remaining) }

// AdmittedResetAt is AdmittedReset for units decided at now (Unix ns), the
// time NewMulti's engines decided at; now = 0 reads the limiter's clock.
func (f *Fields) AdmittedResetAt(now, remaining int64) int64 {
	if f.bucket.limit != 0 {
		return ceilSeconds(f.bucket.fill(f.bucket.burst - min(max(remaining, 0), f.bucket.burst)))
	}
	if f.fixed == 0 {
		return f.admitted
	}
	if now == 0 {
		now = f.now()
	}
	end := (now/f.fixed + 1) * f.fixed
	return ceilSeconds(time.Duration(end - now))
}

// now reads the limiter's Config().Clock, or the wall clock when it has
// none, for AdmittedResetAt: the t= of a FixedWindow admission is the time
// from now to the end of the Unix-aligned window that holds now, rounded
// up to whole seconds, exactly when the units admitted now stop counting
// (an engine with CoarseClock reads a clock up to one CoarseClock period
// behind the wall clock; the rounding up covers that, except near a whole
// second). The window end is at most now + Window ≤ 2262 + 2^60 ns, inside
// int64.
func (f *Fields) now() int64 {
	if f.clk != nil {
		return f.clk.UnixNano()
	}
	return time.Now().UnixNano()
}

// admittedReset returns a true upper bound on how long the units a key
// holds now can keep counting, for the t= of an admitted response: after
// that long with no further traffic on the key, its whole quota is free
// again. w is the sub-window width, W/N.
//
//   - SlidingWindow: a unit admitted at now lands in the sub-window k that
//     holds now, which starts at s ≤ now. A decision at time u reads the
//     sub-window of u and the N before it (the oldest one weighted). From
//     u ≥ s + (N+1)·w = s + W + w on, the sub-window of u is at least
//     k + N + 1, so the oldest one read is at least k + 1: the unit no
//     longer counts. s + W + w ≤ now + W + w.
//   - SlidingWindowStrict: reads the same N+1 sub-windows, all in full;
//     the same bound.
//   - FixedWindow: a unit counts until the end of its Unix-aligned window,
//     at most W after now. AdmittedReset sends that end exactly
//     (AdmittedResetAt); this bound is its ceiling.
//   - SlidingLog: a unit admitted at s counts while u − W < s, so until
//     s + W ≤ now + W.
//   - TokenBucket: the bucket refills from empty within Burst·W/L; the
//     adapters send the tighter (Burst − Remaining)·W/L
//     (AdmittedResetAt), and this bound is its ceiling.
//
// "now" is the key's own time: the engine clamps a decision to the newest
// sub-window (or log time) the key has seen, so under concurrent requests
// a unit can land in a sub-window that another caller's clock reading
// opened, later than this caller's reading by the gap between the two
// reads. The t= value is rounded up to whole seconds, which covers that
// gap except when W + w is a whole number of seconds and the gap is
// positive; it is advisory there, as the draft's t= is (section 4.1.2).
// The bound is tight for the sliding algorithms: a unit admitted at the
// start of a sub-window counts (SlidingWindow: with a weight falling to 0)
// until W + w later. The denial of a full key says the same or
// less: its RetryAfter is when the oldest units it needs have left.
func admittedReset(c engine.Config) time.Duration {
	switch c.Algorithm {
	case engine.FixedWindow, engine.SlidingLog:
		return c.Window
	case engine.TokenBucket:
		if c.Limit > 0 && c.Burst > 0 {
			return bucketShape{burst: c.Burst, limit: c.Limit, window: int64(c.Window)}.fill(c.Burst)
		}
		return c.Window
	}
	n := c.SubWindows
	if n <= 0 {
		n = engine.DefaultSubWindows
	}
	return c.Window + c.Window/time.Duration(n)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetrySeconds returns d rounded up to whole seconds, at least 1: the
// Retry-After value, and the t= of a denial, for a wait of d. A wait of
// engine.Never gives the largest int64 seconds.
func RetrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }
