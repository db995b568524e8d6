#!/usr/bin/env bash
# hack/bench.sh — what `make bench` runs. Three parts, results under
# bench-results/<time>/ and a summary ready to paste into docs/benchmarks.md:
#
#   1. in-process Go benchmarks of ./internal/... (go test -bench)
#   2. HTTP throughput through the sidecar: 1 KiB, 100 KiB and 1 MiB bodies,
#      warmed, then `loadgen fixed` (concurrency 32) for each
#   3. the herd: a slow origin (90 ms, 100 workers), a cold sidecar, and
#      `loadgen herd` (10,000 keys, 600 concurrency)
#
# Everything listens on free loopback ports and is stopped on exit. The load
# generator runs on the same cores as the sidecar and the origin.
#
# Knobs: BENCH_DURATION (10s, parts 2 and 3), BENCHTIME (go test -benchtime,
# 1s), BENCH_GO_TIMEOUT (3m), BENCH_SKIP_GO=1 (skip part 1),
# BENCH_RESULTS (bench-results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

DURATION="${BENCH_DURATION:-10s}"
BENCHTIME="${BENCHTIME:-1s}"
GO_TIMEOUT="${BENCH_GO_TIMEOUT:-3m}"
READY_TIMEOUT=60

tc_need_cmd go curl python3 "${MAKE:-make}"

out="${BENCH_RESULTS:-bench-results}/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
commands=()   # every measuring command, as run, for the summary
status=0

pids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  tc_stop "${pids[@]}"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() { printf '\n== %s\n' "$*"; }

# record CMD... prints CMD (shell-quoted) and keeps it for the summary.
record() {
  local arg line=""
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      line+="$arg "
    else
      line+="'${arg//\'/\'\\\'\'}' "
    fi
  done
  line="${line% }"
  commands+=("$line")
  echo "\$ $line"
}

# start_pair ORIGIN_ARGS... starts demo-origin and a fresh sidecar in front
# of it on free ports, waits until both are ready, and sets ORIGIN, PROXY,
# ADMIN and the pids ORIGIN_PID, SIDECAR_PID. Logs go to $out/<label>-*.log
# where label is $PAIR_LABEL.
start_pair() {
  local op pp ap
  op="$(tc_free_port)"; pp="$(tc_free_port)"; ap="$(tc_free_port)"
  while [[ "$pp" == "$op" ]]; do pp="$(tc_free_port)"; done
  while [[ "$ap" == "$op" || "$ap" == "$pp" ]]; do ap="$(tc_free_port)"; done
  ORIGIN="http://127.0.0.1:$op" PROXY="http://127.0.0.1:$pp" ADMIN="http://127.0.0.1:$ap"
  record bin/demo-origin --listen "127.0.0.1:$op" "$@"
  bin/demo-origin --listen "127.0.0.1:$op" "$@" >"$out/$PAIR_LABEL-origin.log" 2>&1 &
  ORIGIN_PID=$!
  pids+=("$ORIGIN_PID")
  record bin/tiercache-sidecar --upstream "$ORIGIN" --listen "127.0.0.1:$pp" --admin-listen "127.0.0.1:$ap" ${SIDECAR_CONFIG:+--config "$SIDECAR_CONFIG"}
  bin/tiercache-sidecar --upstream "$ORIGIN" --listen "127.0.0.1:$pp" --admin-listen "127.0.0.1:$ap" ${SIDECAR_CONFIG:+--config "$SIDECAR_CONFIG"} \
    >"$out/$PAIR_LABEL-sidecar.log" 2>&1 &
  SIDECAR_PID=$!
  pids+=("$SIDECAR_PID")
  tc_wait_http "$ORIGIN/" "$READY_TIMEOUT" "$ORIGIN_PID" || tc_die "demo-origin did not come up (see $out/$PAIR_LABEL-origin.log)"
  tc_wait_http "$ADMIN/readyz" "$READY_TIMEOUT" "$SIDECAR_PID" || tc_die "the sidecar did not become ready (see $out/$PAIR_LABEL-sidecar.log)"
}

# stop_pair stops both and forgets their pids (which may be reused later).
stop_pair() {
  tc_stop "$SIDECAR_PID" "$ORIGIN_PID"
  pids=()
}

# x_cache URL prints the first token of URL's X-Cache header.
x_cache() {
  curl -s -o /dev/null -D - --max-time 30 "$1" | tr -d '\r' |
    awk 'tolower($0) ~ /^x-cache:/ { sub(/^[^:]*:[ \t]*/, ""); split($0, a, /[;, \t]/); print toupper(a[1]); exit }'
}

# row fixed LABEL FILE | row herd FILE prints a markdown table row from a
# loadgen --json result.
row() {
  python3 - "$@" <<'PY'
import json, sys
kind, path = sys.argv[1], sys.argv[-1]
r = json.load(open(path))
lat = r["latency_ms"]
if kind == "fixed":
    print(f"| {sys.argv[2]} | {r['qps']:.0f} | {lat['p50']:.3f} | {lat['p99']:.3f} "
          f"| {100 * r['hit_rate']:.1f}% | {r['errors']} |")
else:
    origin = (r.get("origin") or {}).get("requests", "?")
    xc = " ".join(f"{k}={v}" for k, v in sorted(r["x_cache"].items()))
    print(f"| {r['qps']:.0f} | {100 * r['hit_rate']:.1f}% | {origin} | {r['errors']} "
          f"| {lat['p50']:.3f} | {lat['p99']:.3f} | {xc} |")
PY
}

step "Building"
"${MAKE:-make}" --no-print-directory build
[[ -x bin/tiercache-sidecar ]] || tc_die "bin/tiercache-sidecar was not built (is cmd/sidecar there?)"

# 1. In-process benchmarks.
if [[ "${BENCH_SKIP_GO:-0}" != 1 ]]; then
  step "1. In-process benchmarks (go test -bench, benchtime $BENCHTIME)"
  record go test -run='^$' -bench=. -benchmem -count=1 -benchtime="$BENCHTIME" -timeout="$GO_TIMEOUT" ./internal/...
  if ! go test -run='^$' -bench=. -benchmem -count=1 -benchtime="$BENCHTIME" -timeout="$GO_TIMEOUT" ./internal/... \
    2>&1 | tee "$out/go-bench.txt"; then
    echo "go benchmarks FAILED (see $out/go-bench.txt)"
    status=1
  fi
fi

# 2. HTTP throughput through a warm cache.
step "2. HTTP throughput, warm cache, concurrency 32, $DURATION per size"
SIDECAR_CONFIG=hack/bench-tier.yaml PAIR_LABEL=throughput start_pair
sizes=("1 KiB:b1k:1024" "100 KiB:b100k:102400" "1 MiB:b1m:1048576")
for s in "${sizes[@]}"; do
  IFS=: read -r label key bytes <<<"$s"
  url="$PROXY/bytes/$key?size=$bytes&ttl=3600"
  curl -s -o /dev/null --max-time 30 "$url" || tc_die "warming $url failed"
  x="$(x_cache "$url")"
  echo "warmed $url: X-Cache ${x:-none} on the second request"
  [[ "$x" == HIT ]] || echo "warning: $label is not served as a HIT after warming"
done
for s in "${sizes[@]}"; do
  IFS=: read -r label key bytes <<<"$s"
  url="$PROXY/bytes/$key?size=$bytes&ttl=3600"
  record bin/loadgen fixed --url "$url" --concurrency 32 --duration "$DURATION" --json
  bin/loadgen fixed --url "$url" --concurrency 32 --duration "$DURATION" --json \
    >"$out/fixed-$key.json" 2> >(tee "$out/fixed-$key.txt" >&2)
done
stop_pair

# 3. The herd: a cold cache in front of a slow, narrow origin.
step "3. Herd: cold sidecar, origin with 90 ms latency and 100 workers, $DURATION"
PAIR_LABEL=herd start_pair --latency 90ms --max-concurrency 100
record bin/loadgen herd --base "$PROXY" --keys 10000 --concurrency 600 --duration "$DURATION" --origin-stats "$ORIGIN/stats" --json
bin/loadgen herd --base "$PROXY" --keys 10000 --concurrency 600 --duration "$DURATION" --origin-stats "$ORIGIN/stats" --json \
  >"$out/herd.json" 2> >(tee "$out/herd.txt" >&2)
stop_pair

# Summary.
cpu="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then commit="$commit (with uncommitted changes)"; fi
{
  echo "## Benchmarks $(date -u +%Y-%m-%d) at $commit"
  echo
  echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(go version | awk '{print $3, $4}'), $(uname -sr)."
  echo "The load generator, the sidecar and the origin share these cores."
  echo
  echo "### HTTP throughput, warm cache (loadgen fixed, concurrency 32, $DURATION)"
  echo
  echo "| body | req/s | p50 ms | p99 ms | served from cache | errors |"
  echo "|---|---:|---:|---:|---:|---:|"
  for s in "${sizes[@]}"; do
    IFS=: read -r label key bytes <<<"$s"
    row fixed "$label" "$out/fixed-$key.json"
  done
  echo
  echo "### Herd (loadgen herd, 10,000 keys, concurrency 600, $DURATION; origin 90 ms, 100 workers; cold start)"
  echo
  echo "| req/s | served from cache (HIT+STALE) | origin requests | errors | p50 ms | p99 ms | X-Cache |"
  echo "|---:|---:|---:|---:|---:|---:|---|"
  row herd "$out/herd.json"
  if [[ -s "$out/go-bench.txt" ]]; then
    echo
    echo "### In-process benchmarks (benchtime $BENCHTIME)"
    echo
    echo '```'
    grep -E '^(Benchmark|pkg:|goos|goarch|cpu:)' "$out/go-bench.txt" || echo "(no benchmarks found)"
    echo '```'
  fi
  echo
  echo "Commands:"
  echo
  echo '```'
  printf '%s\n' "${commands[@]}"
  echo '```'
} >"$out/summary.md"

step "Summary (also in $out/summary.md; raw results beside it)"
cat "$out/summary.md"
exit "$status"
