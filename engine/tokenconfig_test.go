package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Config.Burst is validated with a message naming the field and its range:
// 0 or 1 … MaxLimit with TokenBucket, a span Burst·Window/gcd within 2^60, and 0
// with every other algorithm.
func TestTokenBucketBadBurst(t *testing.T) {
	tb := engine.Config{Limit: 10, Window: time.Second, Algorithm: engine.TokenBucket}
	cases := []struct {
		name string
		mod  func(*engine.Config)
		want []string
	}{
		{"negative", func(c *engine.Config) { c.Burst = -1 }, []string{"Config.Burst = -1", "0 (Limit) or 1 … 1099511627775"}},
		{"above MaxLimit", func(c *engine.Config) { c.Burst = engine.MaxLimit + 1 }, []string{"Config.Burst = 1099511627776", "1 … 1099511627775"}},
		{"min int64", func(c *engine.Config) { c.Burst = -1 << 63 }, []string{"Config.Burst = -9223372036854775808"}},
		{"prime limit per day", func(c *engine.Config) { c.Limit = 999_999; c.Window = 24 * time.Hour }, []string{"Config.Burst = 999999", "units of 1/37037 ns"}},
		{"per-key limits", func(c *engine.Config) { c.PerKeyLimits = true }, []string{"Config.PerKeyLimits is not supported with TokenBucket"}},
		{"key limit", func(c *engine.Config) { c.KeyLimit = func(string) int64 { return 1 } }, []string{"Config.KeyLimit is not supported with TokenBucket"}},
		{"audit", func(c *engine.Config) { c.Audit = 1 }, []string{"Config.Audit is not supported with TokenBucket", "Burst + ⌊D·Limit/Window⌋"}},
		{"span above 2^60 units", func(c *engine.Config) { c.Window = engine.MaxWindow; c.Limit = 1; c.Burst = 2 }, []string{"Config.Burst = 2", "Burst·Window/gcd(Limit, Window) = 2·1152921504606846976", "above 2^60"}},
		{"span past int64", func(c *engine.Config) { c.Limit = 1; c.Burst = engine.MaxLimit }, []string{"Config.Burst = 1099511627775", "above 2^60"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := tb
			c.mod(&cfg)
			e, err := engine.New(cfg)
			require.Error(t, err)
			require.Nil(t, e)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		_, err := engine.New(engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, Burst: 5})
		require.Error(t, err, alg.String())
		require.Contains(t, err.Error(), "Config.Burst = 5 is set but Config.Algorithm is "+alg.String())
	}
}

// TokenBucket is a fifth Algorithm, appended so that the values of the
// others do not change, and it round-trips through its flag name.
func TestTokenBucketAlgorithmName(t *testing.T) {
	require.Equal(t, engine.Algorithm(4), engine.TokenBucket)
	require.Equal(t, "token", engine.TokenBucket.String())
	a, err := engine.ParseAlgorithm("token")
	require.NoError(t, err)
	require.Equal(t, engine.TokenBucket, a)
}
