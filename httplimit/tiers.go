package httplimit

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/engine"
)

// Tiers is a hot-swappable table of limits per tenant (or tier). Its
// KeyLimit method is meant for engine.Config.KeyLimit, and Swap replaces
// the table and applies it to live keys. It is safe for concurrent use.
//
// A key's tenant is the part of the key before the first "\x00", or the
// whole key when it has none: with Compose(tenantKey, KeyByIP(64)) every
// IP of a tenant gets the tenant's limit, each in its own window.
//
// Every limit is validated before it is stored, so that no tenant's
// requests meet a limit the engine refuses (which it would answer 500): a
// table limit is 1 … engine.MaxLimit, the default 0 (the engine's
// Config.Limit) or 1 … engine.MaxLimit. A SlidingLog engine caps limits
// lower (its Config.MaxLogLimit); Swap and Set check against the engine
// they are given, NewTiers cannot, as the engine does not exist yet.
type Tiers struct {
	def   int64
	table atomic.Pointer[map[string]int64]
	mu    sync.Mutex // serialises Swap and Set, so that a Set's read-copy-write loses no other change
}

// NewTiers returns Tiers with the limit def for tenants not in table
// (0 means the engine's Config.Limit) and a copy of table. A limit out of
// range is an error naming the tenant and the range.
func NewTiers(def int64, table map[string]int64) (*Tiers, error) {
	if def < 0 || def > engine.MaxLimit {
		return nil, fmt.Errorf("httplimit: NewTiers default limit = %d, want 0 (the engine's Config.Limit) or 1 … %d", def, int64(engine.MaxLimit))
	}
	if err := checkTable(table, engine.MaxLimit, "NewTiers"); err != nil {
		return nil, err
	}
	p := &Tiers{def: def}
	t := maps.Clone(table)
	if t == nil {
		t = map[string]int64{}
	}
	p.table.Store(&t)
	return p, nil
}

func checkTable(table map[string]int64, maxLimit int64, fn string) error {
	for k, v := range table {
		if v < 1 || v > maxLimit {
			return fmt.Errorf("httplimit: %s: tenant %q limit = %d, want 1 … %d", fn, k, v, maxLimit)
		}
	}
	return nil
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
func (p *Tiers) KeyLimit(key string) int64 {
	if l, ok := (*p.table.Load())[Tenant(key)]; ok {
		return l
	}
	return p.def
}

// Limit returns the limit of tenant, or the default, and whether the
// tenant is in the table.
func (p *Tiers) Limit(tenant string) (int64, bool) {
	l, ok := (*p.table.Load())[tenant]
	if !ok {
		return p.def, false
	}
	return l, true
}

// Table returns a copy of the current table.
func (p *Tiers) Table() map[string]int64 { return maps.Clone(*p.table.Load()) }

// Swap atomically replaces the table with a copy of table, so that keys
// created from now on get the new limits, and then, if e is not nil,
// applies it to every live key with e.UpdateLimits, keeping each key's
// counts: a lowered limit applies from the next decision, units already
// admitted stay.
//
// Every limit must be 1 … engine.MaxLimit, and, with e, within e's own
// maximum (Config.MaxLogLimit for SlidingLog), which the default must
// respect too; otherwise Swap returns an error naming the tenant and the
// range, and changes nothing. A tenant dropped from the table falls back
// to the default, unless the default is 0, in which case its live keys
// keep their limits until they are reclaimed. e must have been built with
// Config.KeyLimit (or PerKeyLimits).
func (p *Tiers) Swap(table map[string]int64, e *engine.Engine) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swapLocked(table, e)
}

func (p *Tiers) swapLocked(table map[string]int64, e *engine.Engine) error {
	maxLimit := int64(engine.MaxLimit)
	if e != nil {
		if c := e.Config(); c.Algorithm == engine.SlidingLog {
			maxLimit = c.MaxLogLimit
			if p.def > maxLimit {
				return fmt.Errorf("httplimit: Tiers default limit = %d is above the SlidingLog engine's Config.MaxLogLimit = %d", p.def, maxLimit)
			}
		}
	}
	if err := checkTable(table, maxLimit, "Swap"); err != nil {
		return err
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

// Set changes one tenant's limit (copy on write) and applies it like Swap;
// a refused limit changes nothing.
func (p *Tiers) Set(tenant string, limit int64, e *engine.Engine) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.Table()
	t[tenant] = limit
	return p.swapLocked(t, e)
}
