package redisstore

import (
	"fmt"

	"github.com/ringlimit/ringlimit/engine"
)

// engineOnly returns an error naming the first field of cfg that only the
// in-process engine implements, or nil. New refuses such a field rather
// than ignore it: a MaxKeys that bounds nothing, or a Clock that decides
// nothing, would be a promise the Limiter does not keep. Time is Redis
// TIME, keys expire by TTL, and there is no key table, sweeper or
// self-audit (redisstore/README.md, "What each store supports").
func engineOnly(cfg engine.Config) error {
	for _, f := range []struct {
		name, why string
		set       bool
	}{
		{"MaxLogLimit", "it caps SlidingLog, which redisstore does not run", cfg.MaxLogLimit != 0},
		{"Clock", "time is Redis TIME", cfg.Clock != nil},
		{"CoarseClock", "time is Redis TIME", cfg.CoarseClock != 0},
		{"Shards", "keys live in Redis, not in an in-process table", cfg.Shards != 0},
		{"MaxKeys", "keys live in Redis and expire by TTL; bound Redis's memory with maxmemory", cfg.MaxKeys != 0},
		{"ExpectedKeys", "keys live in Redis, not in an in-process table", cfg.ExpectedKeys != 0},
		{"DisableEviction", "keys expire by TTL in Redis", cfg.DisableEviction},
		{"SweepInterval", "keys expire by TTL in Redis", cfg.SweepInterval != 0},
		{"Audit", "the self-audit replays the engine's own decisions", cfg.Audit != 0},
		{"AuditMaxKeys", "the self-audit replays the engine's own decisions", cfg.AuditMaxKeys != 0},
		{"AuditMaxEntries", "the self-audit replays the engine's own decisions", cfg.AuditMaxEntries != 0},
		{"AuditBuffer", "the self-audit replays the engine's own decisions", cfg.AuditBuffer != 0},
	} {
		if f.set {
			return fmt.Errorf("redisstore: Config.%s is set, want its zero value: it applies to the in-process engine only (%s)", f.name, f.why)
		}
	}
	return nil
}

// validate validates cfg as engine.New does, and returns it with the
// engine's defaults (SubWindows, MaxKeyBytes, a TokenBucket's Burst) and
// the engine-only fields zero, as given: Config reports no default that
// means nothing here.
func validate(cfg engine.Config) (engine.Config, error) {
	vc := cfg
	vc.DisableEviction = true
	if cfg.Algorithm == engine.TokenBucket {
		// The engine's bucket has no per-key limits (its unit is fixed by
		// Limit); redisstore's has, asked on every decision (tokenbucket.go).
		vc.KeyLimit, vc.PerKeyLimits = nil, false
	}
	e, err := engine.New(vc)
	if err != nil {
		return engine.Config{}, err
	}
	norm := e.Config()
	norm.Shards, norm.SweepInterval, norm.DisableEviction = 0, 0, false
	norm.KeyLimit, norm.PerKeyLimits = cfg.KeyLimit, norm.PerKeyLimits || cfg.KeyLimit != nil
	_ = e.Close()
	return norm, nil
}
