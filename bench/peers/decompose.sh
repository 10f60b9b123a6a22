#!/usr/bin/env bash
# Decomposes the cost of one decision at 1M keys (docs/benchmarks.md,
# "Decomposition"): a CPU profile of the engine under b.RunParallel, read as
# a top list, and cachegrind counts per decision for each limiter in PEERS,
# from one goroutine: the difference of two runs of cmd/peerdecomp with N1
# and N2 decisions, divided by N2 − N1, so that building and filling the
# keys cancels out. Cachegrind counts instructions and simulates the caches
# (LL: 32 MiB, 16-way, 64-byte lines; no prefetcher, no TLB), so its figures
# do not depend on the machine's load.
#
#   ./decompose.sh                       # everything, about 6 minutes
#   PEERS=' ' ./decompose.sh             # the profile only (an empty PEERS= means the default list)
#   PROFILE=0 ./decompose.sh             # cachegrind only
#   PEERS="ringlimit-sliding floor-sum11" KEYS=1000 ./decompose.sh
#
# Output: out/decompose/ holds the raw cachegrind files, the cg_diff files
# and the profile; the tables go to stdout (Markdown).
set -euo pipefail
cd "$(dirname "$0")"

KEYS="${KEYS:-1000000}"
N1="${N1:-262144}"
N2="${N2:-1310720}"
PEERS="${PEERS:-ringlimit-sliding-at ringlimit-sliding floor-sum11 sethvargo xrate-xsync}"
DETAIL="${DETAIL:-ringlimit-sliding-at ringlimit-sliding}"
PROFILE="${PROFILE:-1}"
OUT=out/decompose
mkdir -p "$OUT"
go build -o "$OUT/peerdecomp" ./cmd/peerdecomp
command -v valgrind >/dev/null || { echo "decompose: valgrind is missing (apt-get install valgrind)" >&2; exit 1; }

if [[ "$PROFILE" != 0 ]]; then
	echo "## CPU profile: engine, sliding window, AllowAt, 1M keys, b.RunParallel"
	echo
	echo '```'
	(cd ../.. && go test -run '^$' -bench 'Allow/alg=sliding/clock=at/keys=1e6/parallel$' -benchtime 20000000x \
		-cpuprofile "bench/peers/$OUT/cpu1m.prof" -o "bench/peers/$OUT/bench.test" ./bench/ | grep -E '^Benchmark|ns/op' || true)
	go tool pprof -top -nodecount 20 "$OUT/bench.test" "$OUT/cpu1m.prof" 2>/dev/null | sed -n '/flat%/,$p'
	echo '```'
	echo
fi

cg() { # peer n → the summary line's counts
	valgrind --tool=cachegrind --cache-sim=yes --LL=33554432,16,64 \
		--cachegrind-out-file="$OUT/cg.$1.$2.out" "$OUT/peerdecomp" -peer "$1" -keys "$KEYS" -n "$2" >/dev/null 2>&1
	grep '^summary:' "$OUT/cg.$1.$2.out" | cut -d' ' -f2-
}

[[ -n "${PEERS// }" ]] || exit 0
d=$((N2 - N1))
echo "## Cachegrind per decision: $KEYS keys, one goroutine, delta of $N2 − $N1 decisions"
echo
echo "| limiter | instructions | D1 misses | LL misses (data) | LL misses (all) |"
echo "|---|--:|--:|--:|--:|"
for p in $PEERS; do
	a=($(cg "$p" "$N1")); b=($(cg "$p" "$N2"))
	# events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
	awk -v p="$p" -v d="$d" -v a="${a[*]}" -v b="${b[*]}" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		for (i = 1; i <= 9; i++) z[i] = (y[i] - x[i]) / d
		printf "| %s | %.0f | %.2f | %.2f | %.2f |\n", p, z[1], z[5] + z[8], z[6] + z[9], z[3] + z[6] + z[9]
	}'
done
echo
for p in $DETAIL; do
	[[ -f "$OUT/cg.$p.$N2.out" ]] || continue
	cg_diff "$OUT/cg.$p.$N1.out" "$OUT/cg.$p.$N2.out" > "$OUT/cg.$p.diff" 2>/dev/null
	echo "### $p: per source file and function, per decision (≥ 1% of instructions)"
	echo
	echo "| instructions | LL misses (data) | source file | function (inlined code is counted in the function it was inlined into) |"
	echo "|--:|--:|---|---|"
	cg_annotate --auto=no --threshold=1 --show=Ir,DLmr,DLmw "$OUT/cg.$p.diff" |
		perl -ne 'BEGIN { $d = shift @ARGV } $on = 1, next if /file:function/; next unless $on;
			next unless /^\s*(-?[\d,]+)(?: \([^)]*\))?\s+(-?[\d,]+|\.)(?: \([^)]*\))?\s+(-?[\d,]+|\.)(?: \([^)]*\))?\s+(\S.*?)\s*$/;
			my ($ir, $lr, $lw, $at) = ($1, $2, $3, $4); tr/,//d for $ir, $lr, $lw; $lr = 0 if $lr eq "."; $lw = 0 if $lw eq ".";
			my ($file, $fn) = split /:/, $at, 2; $file =~ s{.*/(?:go/src|pkg/mod|wt-[^/]+|ringlimit)/}{}; $fn =~ s{github\.com/ringlimit/ringlimit/}{}g;
			$fn =~ s{\[go\.shape.*\]}{[…]}; $file =~ s{^github\.com/}{};
			printf "| %.0f | %.2f | `%s` | `%s` |\n", $ir / $d, ($lr + $lw) / $d, $file, $fn if abs($ir / $d) >= 0.5;' "$d" | tee "$OUT/detail.$p.md"
	if grep -q 'Geometry).settle' "$OUT/detail.$p.md"; then
		# The harness's window is an hour of 10 sub-windows: a run that
		# spans a 6-minute boundary pays every key's once-per-sub-window
		# settle and walk, which is not the common path.
		echo
		echo "**Warning:** a sub-window boundary fell inside a run of $p (settle and the walk show above); its row counts them. Re-run: \`PEERS=$p DETAIL=$p PROFILE=0 ./decompose.sh\`."
	fi
	echo
done
