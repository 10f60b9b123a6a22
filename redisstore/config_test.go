package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// Config reports what the limiter decides with, defaults filled in as the
// engine fills them, so that httplimit and grpclimit can send w= and t=
// for a redisstore limiter as for an engine (they look for Config()).
func TestConfigAsTheEngineReportsIt(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, cfg := range []engine.Config{
		{Limit: 7, Window: time.Minute},
		{Limit: 7, Window: time.Minute, SubWindows: 6, Algorithm: engine.SlidingWindowStrict},
		{Limit: 7, Window: time.Hour, Algorithm: engine.FixedWindow},
	} {
		l := mustNew(t, c, cfg, WithBreaker(0, 0))
		e, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := e.Config()
		_ = e.Close()
		got := l.Config()
		if got.Limit != want.Limit || got.Window != want.Window || got.SubWindows != want.SubWindows || got.Algorithm != want.Algorithm {
			t.Fatalf("Config() = %+v, the engine's %+v", got, want)
		}
		var _ interface{ Config() engine.Config } = l
	}
}
