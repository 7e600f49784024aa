#!/usr/bin/env bash
# Runs Go benchmarks and prints their figures as "BENCH <name> <value> <unit>".
# A benchmark names a figure by reporting a metric whose unit is
# "<name>:<unit>" (b.ReportMetric(v, "store.embedded.insert_rows_per_s:rows/s")).
# The raw `go test -bench` output goes to .cache/bench/<tag>.txt for benchstat.
#   tests/bench.sh TAG PACKAGE... [-- extra go test flags]
set -euo pipefail
tag=$1; shift
pkgs=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do pkgs+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
mkdir -p .cache/bench
raw=.cache/bench/$tag.txt
go test -run '^$' -bench . -benchtime "${BENCHTIME:-5x}" -count 1 "$@" "${pkgs[@]}" | tee "$raw" >&2
awk '/^Benchmark/ { for (i = 3; i < NF; i++) if ($(i+1) ~ /:/) { split($(i+1), u, ":"); printf "BENCH %s %s %s\n", u[1], $i, u[2] } }' "$raw"
