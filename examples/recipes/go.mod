module github.com/ringlimit/ringlimit/examples/recipes

go 1.26.8

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/ringlimit/ringlimit v0.1.0
	github.com/ringlimit/ringlimit/redisstore v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
