package adapter

import (
	"context"
	"fmt"
	"reflect"

	"github.com/ringlimit/ringlimit/engine"
)

// The shapes a Backend accepts: httplimit.Limiter and grpclimit.Limiter
// (*engine.Engine), httplimit.ContextLimiter and grpclimit.ContextLimiter
// (*redisstore.Limiter), and the optional Config method of either.
type (
	localLimiter = interface {
		AllowN(key string, n int64) engine.Decision
	}
	remoteLimiter = interface {
		AllowN(ctx context.Context, key string, n int64) (engine.Decision, error)
	}
	Configured = interface{ Config() engine.Config }
)

// Backend is a limiter of either shape, asked through one method. The zero
// Backend is not usable.
type Backend struct {
	local     localLimiter
	remote    remoteLimiter
	eng       *engine.Engine   // local, when it is an engine: for engine.AllowAll and Reserve
	reserving reservingLimiter // remote, when it can reserve (held.go)
}

// NewBackend wraps l, a Limiter or a ContextLimiter. Its error says what l
// is instead, for the caller to prefix with its own name.
func NewBackend(l any) (Backend, error) {
	if IsNil(l) {
		return Backend{}, fmt.Errorf("nil limiter (%T)", l)
	}
	switch l := l.(type) {
	case localLimiter:
		e, _ := l.(*engine.Engine)
		return Backend{local: l, eng: e}, nil
	case remoteLimiter:
		rl, _ := l.(reservingLimiter)
		return Backend{remote: l, reserving: rl}, nil
	}
	return Backend{}, fmt.Errorf("%T is not a limiter; want AllowN(key string, n int64) engine.Decision (Limiter, as *engine.Engine) or AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) (ContextLimiter, as *redisstore.Limiter)", l)
}

// AllowN asks the limiter for n units of key; ctx reaches a ContextLimiter
// only. A Limiter never fails; a ContextLimiter's error comes with its
// failure policy's Decision.
func (b *Backend) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	if b.local != nil {
		return b.local.AllowN(key, n), nil
	}
	return b.remote.AllowN(ctx, key, n)
}

// Engine returns the limiter when it is an *engine.Engine, else nil.
func (b *Backend) Engine() *engine.Engine { return b.eng }

// IsNil reports whether l is nil or a nil pointer.
func IsNil(l any) bool {
	v := reflect.ValueOf(l)
	return !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil())
}
