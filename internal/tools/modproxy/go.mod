module github.com/ringlimit/ringlimit/internal/tools/modproxy

go 1.26.8

require golang.org/x/mod v0.43.0
