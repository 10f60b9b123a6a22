#!/usr/bin/env bash
cd "$(dirname "$0")"  # beside eng.{base,head}.test and bench.{base,head}.test (go test -c of ./engine and ./bench at each commit)
rm -f e.old e.new b.old b.new
for k in 1 2 3 4 5 6; do
  ./eng.base.test -test.run '^$' -test.bench '^BenchmarkHotKey$/alg=(sliding|strict|fixed|token)|^BenchmarkPerKeyLimitHotKey$/alg=sliding' -test.benchtime 150ms >> e.old
  ./eng.head.test -test.run '^$' -test.bench '^BenchmarkHotKey$/alg=(sliding|strict|fixed|token)|^BenchmarkPerKeyLimitHotKey$/alg=sliding' -test.benchtime 150ms >> e.new
  ./bench.base.test -test.run '^$' -test.bench 'Allow/alg=(sliding|strict)/clock=(precise|coarse)/keys=1/serial$|Allow/alg=sliding/clock=at/keys=1e3/serial$' -test.benchtime 150ms >> b.old
  ./bench.head.test -test.run '^$' -test.bench 'Allow/alg=(sliding|strict)/clock=(precise|coarse)/keys=1/serial$|Allow/alg=sliding/clock=at/keys=1e3/serial$' -test.benchtime 150ms >> b.new
done
