package adaptertest

import (
	"fmt"
	"strconv"
	"strings"
)

// Member is one member of a Structured Field List of rate-limit policies
// (RateLimit, RateLimit-Policy): a String name with Integer parameters.
type Member struct {
	Name   string
	Params map[string]int64
}

// ParseList parses the field lines of a RateLimit or RateLimit-Policy
// field (or metadata values) as RFC 9651 lists of `"name";k=v;…` members,
// independently of the adapters' writer: lines are joined by commas (RFC
// 9651 section 4.2), and members split at commas outside strings.
func ParseList(lines []string) ([]Member, error) {
	s := strings.Join(lines, ",")
	var out []Member
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t")
		if len(s) == 0 || s[0] != '"' {
			return nil, fmt.Errorf("member does not start with a string: %q", s)
		}
		i := 1
		var name strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
			if i < len(s) {
				name.WriteByte(s[i])
			}
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated string in %q", s)
		}
		s = s[i+1:]
		m := Member{Name: name.String(), Params: map[string]int64{}}
		for len(s) > 0 && s[0] == ';' {
			end := strings.IndexAny(s[1:], ";,")
			if end < 0 {
				end = len(s) - 1
			}
			k, v, ok := strings.Cut(s[1:1+end], "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("parameter %q is not key=integer", s[1:1+end])
			}
			m.Params[k] = n
			s = s[1+end:]
		}
		out = append(out, m)
		s = strings.TrimLeft(s, " \t")
		if len(s) > 0 {
			if s[0] != ',' {
				return nil, fmt.Errorf("junk after member: %q", s)
			}
			s = s[1:]
		}
	}
	return out, nil
}

// CheckMembers checks that the policy and rate lists have one member per
// name, in order, with parameters q and r as given and a t=; it returns
// what differs, or "".
func CheckMembers(policy, rate []string, names []string, q, r []int64) string {
	pol, err := ParseList(policy)
	if err != nil {
		return "policy: " + err.Error()
	}
	rl, err := ParseList(rate)
	if err != nil {
		return "rate: " + err.Error()
	}
	if len(pol) != len(names) || len(rl) != len(names) {
		return fmt.Sprintf("policy %q, rate %q: want %d members each", policy, rate, len(names))
	}
	for i, n := range names {
		if pol[i].Name != n || rl[i].Name != n || pol[i].Params["q"] != q[i] || rl[i].Params["r"] != r[i] {
			return fmt.Sprintf("member %d: policy %+v, rate %+v; want %q q=%d r=%d", i, pol[i], rl[i], n, q[i], r[i])
		}
		if _, ok := rl[i].Params["t"]; !ok {
			return fmt.Sprintf("member %d: no t= in %+v", i, rl[i])
		}
	}
	return ""
}
