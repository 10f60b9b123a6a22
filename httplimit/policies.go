package httplimit

import (
	"fmt"
	"maps"
	"strings"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/engine"
)

// Policies is a hot-swappable table of limits per tenant (or tier). Its
// KeyLimit method is meant for engine.Config.KeyLimit, and Swap replaces
// the table and applies it to live keys. It is safe for concurrent use.
//
// A key's tenant is the part of the key before the first "\x00", or the
// whole key when it has none: with Compose(tenantKey, KeyByIP(64)) every
// IP of a tenant gets the tenant's limit, each in its own window.
type Policies struct {
	def   int64
	table atomic.Pointer[map[string]int64]
}

// NewPolicies returns Policies with the limit def for tenants not in table
// (0 means the engine's Config.Limit) and a copy of table.
func NewPolicies(def int64, table map[string]int64) *Policies {
	p := &Policies{def: def}
	t := maps.Clone(table)
	if t == nil {
		t = map[string]int64{}
	}
	p.table.Store(&t)
	return p
}

// Tenant returns the tenant part of key: before the first "\x00", or all
// of it.
func Tenant(key string) string {
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i]
	}
	return key
}

// KeyLimit returns the limit of key's tenant, or the default. It does not
// allocate.
func (p *Policies) KeyLimit(key string) int64 {
	if l, ok := (*p.table.Load())[Tenant(key)]; ok {
		return l
	}
	return p.def
}

// Limit returns the limit of tenant, or the default, and whether the
// tenant is in the table.
func (p *Policies) Limit(tenant string) (int64, bool) {
	l, ok := (*p.table.Load())[tenant]
	if !ok {
		return p.def, false
	}
	return l, true
}

// Table returns a copy of the current table.
func (p *Policies) Table() map[string]int64 { return maps.Clone(*p.table.Load()) }

// Swap atomically replaces the table with a copy of table, so that keys
// created from now on get the new limits, and then, if e is not nil,
// applies it to every live key with e.UpdateLimits, keeping each key's
// counts: a lowered limit applies from the next decision, units already
// admitted stay. Every limit must be ≥ 1, or Swap returns an error and
// changes nothing. A limit above the engine's maximum is stored, and then
// reported by UpdateLimits' error (keys created with it are refused with
// a 500, see Middleware). A tenant dropped from the
// table falls back to the default, unless the default is 0, in which case
// its live keys keep their limits until they are reclaimed. e must have
// been built with Config.KeyLimit (or PerKeyLimits).
func (p *Policies) Swap(table map[string]int64, e *engine.Engine) error {
	for k, v := range table {
		if v < 1 {
			return fmt.Errorf("httplimit: policy %q: limit %d, want ≥ 1", k, v)
		}
	}
	t := maps.Clone(table)
	if t == nil {
		t = map[string]int64{}
	}
	p.table.Store(&t)
	if e == nil {
		return nil
	}
	return e.UpdateLimits(func(key string, cur int64) int64 {
		if l := p.KeyLimit(key); l != cur {
			return l // 0 (default = engine's) keeps cur
		}
		return 0
	})
}

// Set changes one tenant's limit (copy on write) and applies it like Swap.
func (p *Policies) Set(tenant string, limit int64, e *engine.Engine) error {
	t := p.Table()
	t[tenant] = limit
	return p.Swap(t, e)
}
