// Package redisrate holds BenchmarkVsRedisRate, which compares redisstore
// with go-redis/redis_rate on one redis-server. It lives in bench/peers so
// that redisstore's module does not require redis_rate; the benchmark starts
// its own redis-server on a loopback port and skips, saying so, where
// redis-server is not installed. The figures and how to read them are in
// docs/redisstore-measurements.md.
package redisrate
