#!/usr/bin/env bash
# hack/bench.sh — what `make bench` runs. Six parts, results under
# bench-results/<time>/ and a summary ready to paste into docs/benchmarks.md:
#
#   1. in-process Go benchmarks of ./internal/... (go test -bench)
#   2. HTTP throughput through the sidecar: 1 KiB, 100 KiB and 1 MiB bodies,
#      warmed, then `loadgen fixed` (concurrency 32) for each
#   3. the herd: a slow origin (90 ms, 100 workers), a cold sidecar, and
#      `loadgen herd` (10,000 keys, 600 concurrency)
#   4. L2 hit vs L1 hit vs origin: one Redis; sidecar A fills 2,000 × 1 KiB
#      keys; sidecar B (1 MiB L1, no warm start) serves uniform traffic over
#      them, mostly from Redis; the same load on A (L1 hits) and straight at
#      the origin (no cache)
#   5. the herd through 4 replicas sharing one Redis, cluster-wide
#      coalescing on (default) and off
#   6. rolling restart: 2 replicas under steady load; replica 1 is taken out,
#      stopped, started afresh with the same flags, and put back once ready;
#      with warm start, without it, and without Redis (L1 only)
#
# Everything listens on free loopback ports and is stopped on exit. The load
# generator runs on the same cores as the sidecars, Redis and the origin.
# Replicas are reached on their own ports, so loadgen sends one Host header
# to all (--host), as clients of a Service do: the host is part of the key.
#
# Knobs: BENCH_DURATION (10s, parts 2–5), BENCHTIME (go test -benchtime,
# 1s), BENCH_GO_TIMEOUT (3m), BENCH_PARTS (which parts, "1 2 3 4 5 6"),
# BENCH_SKIP_GO=1 (skip part 1), BENCH_ROLL_DURATION (20s, part 6),
# BENCH_RESULTS (bench-results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

DURATION="${BENCH_DURATION:-10s}"
BENCHTIME="${BENCHTIME:-1s}"
GO_TIMEOUT="${BENCH_GO_TIMEOUT:-3m}"
PARTS=" ${BENCH_PARTS:-1 2 3 4 5 6} "
if [[ "${BENCH_SKIP_GO:-0}" == 1 ]]; then PARTS="${PARTS/ 1 / }"; fi
ROLL_DURATION="${BENCH_ROLL_DURATION:-20s}"
READY_TIMEOUT=60
# The Host header every replica sees (parts 4–6), like a Service's name.
HOST=web.bench.svc

tc_need_cmd go curl python3 "${MAKE:-make}"

out="${BENCH_RESULTS:-bench-results}/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
declare -A part_cmds=() # part number → every measuring command, as run
part=0
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
want() { [[ "$PARTS" == *" $1 "* ]]; }

# record CMD... prints CMD (shell-quoted) and keeps it for the summary of
# the current part.
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
  part_cmds[$part]+="$line"$'\n'
  echo "\$ $line"
}

# The kernel's range of local ports for outgoing connections: a port in it
# can be taken by a client connection (loadgen opens hundreds, each sidecar
# a pool to Redis) between picking it and binding it, or while a replica
# restarts on it, so listeners stay out of it.
read -r EPHEMERAL_LO EPHEMERAL_HI < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LO=1 EPHEMERAL_HI=0

# free_ports N sets PORTS to N distinct free loopback ports, outside the
# ephemeral range when tc_free_port finds such ports.
free_ports() {
  local p seen=" " tries=0
  PORTS=()
  while ((${#PORTS[@]} < $1)); do
    p="$(tc_free_port)"
    tries=$((tries + 1))
    if ((tries < 500 && p >= EPHEMERAL_LO && p <= EPHEMERAL_HI)); then continue; fi
    if [[ "$seen" != *" $p "* ]]; then PORTS+=("$p"); seen+="$p "; fi
  done
}

# forget PID drops PID from the pids stopped on exit (it was stopped).
forget() {
  local keep=() p
  for p in "${pids[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  pids=("${keep[@]}")
}

# stop_all stops every process this script still runs and forgets them.
stop_all() {
  tc_stop "${pids[@]}"
  pids=()
}

# start_origin LABEL ARGS... starts demo-origin on a free port, waits until
# it answers, and sets ORIGIN and ORIGIN_PID. Log: $out/LABEL.log.
start_origin() {
  local label="$1"; shift
  free_ports 1
  ORIGIN="http://127.0.0.1:${PORTS[0]}"
  record bin/demo-origin --listen "127.0.0.1:${PORTS[0]}" "$@"
  bin/demo-origin --listen "127.0.0.1:${PORTS[0]}" "$@" >"$out/$label.log" 2>&1 &
  ORIGIN_PID=$!
  pids+=("$ORIGIN_PID")
  tc_wait_http "$ORIGIN/" "$READY_TIMEOUT" "$ORIGIN_PID" || tc_die "demo-origin did not come up (see $out/$label.log)"
}

# start_sidecar LABEL PORT ADMIN_PORT ARGS... starts a sidecar listening on
# 127.0.0.1:PORT (admin ADMIN_PORT) with ARGS, waits for its /readyz, and
# sets SIDECAR (its URL), SIDECAR_ADMIN, SIDECAR_PID and READY_S (seconds
# from start to ready). Log: $out/LABEL.log (appended to).
start_sidecar() {
  local label="$1" port="$2" aport="$3"; shift 3
  local args=(--listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$aport" "$@")
  SIDECAR="http://127.0.0.1:$port" SIDECAR_ADMIN="http://127.0.0.1:$aport"
  record bin/tiercache-sidecar "${args[@]}"
  local t0=$EPOCHREALTIME
  bin/tiercache-sidecar "${args[@]}" >>"$out/$label.log" 2>&1 &
  SIDECAR_PID=$!
  pids+=("$SIDECAR_PID")
  tc_wait_http "$SIDECAR_ADMIN/readyz" "$READY_TIMEOUT" "$SIDECAR_PID" || tc_die "sidecar $label did not become ready (see $out/$label.log)"
  READY_S="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$EPOCHREALTIME")"
}

# start_redis LABEL starts a throwaway redis-server (no persistence) on a
# free port and sets REDIS_ADDR and REDIS_PID. Log: $out/LABEL.log.
start_redis() {
  local label="$1"
  free_ports 1
  REDIS_ADDR="127.0.0.1:${PORTS[0]}"
  record "$REDIS_SERVER" --port "${PORTS[0]}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no
  "$REDIS_SERVER" --port "${PORTS[0]}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/$label.log" 2>&1 &
  REDIS_PID=$!
  pids+=("$REDIS_PID")
  local deadline=$((SECONDS + 20))
  until tc_port_busy "${PORTS[0]}"; do
    kill -0 "$REDIS_PID" 2>/dev/null || tc_die "redis-server exited (see $out/$label.log)"
    ((SECONDS < deadline)) || tc_die "redis-server did not listen within 20s (see $out/$label.log)"
    sleep 0.1
  done
}

# redis_keys prints the number of keys in the Redis at REDIS_ADDR ("?" when
# redis-cli is not installed).
redis_keys() {
  if command -v redis-cli >/dev/null 2>&1; then
    redis-cli -h 127.0.0.1 -p "${REDIS_ADDR##*:}" dbsize 2>/dev/null || echo "?"
  else
    echo "?"
  fi
}

# metric ADMIN NAME prints the sum of a sidecar metric's samples.
metric() {
  curl -s --max-time 5 "$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { print s + 0 }'
}

# loadgen NAME ARGS... runs bin/loadgen ARGS --json, keeping the JSON in
# $out/NAME.json and the text in $out/NAME.txt (also shown).
loadgen() {
  local name="$1"; shift
  record bin/loadgen "$@" --json
  bin/loadgen "$@" --json >"$out/$name.json" 2> >(tee "$out/$name.txt" >&2)
}

# write_bases FILE URL... replaces FILE atomically with one URL a line.
write_bases() {
  local f="$1"; shift
  printf '%s\n' "$@" >"$f.tmp"
  mv "$f.tmp" "$f"
}

# x_cache URL prints the first token of URL's X-Cache header.
x_cache() {
  curl -s -o /dev/null -D - --max-time 30 "$1" | tr -d '\r' |
    awk 'tolower($0) ~ /^x-cache:/ { sub(/^[^:]*:[ \t]*/, ""); split($0, a, /[;, \t]/); print toupper(a[1]); exit }'
}

# row KIND ARGS... prints a markdown table row from loadgen --json results:
#   row fixed LABEL FILE | row herd FILE | row uniform LABEL FILE
#   row replicas LABEL FILE L2_FILE | row roll LABEL FILE BASE READY_S LOADED
row() {
  python3 - "$@" <<'PY'
import json, sys

kind, args = sys.argv[1], sys.argv[2:]

def load(path):
    with open(path) as f:
        return json.load(f)

def mix(counts, top=6):
    """X-Cache values as shares of all answers, largest first."""
    total = sum(counts.values())
    if not total:
        return "none"
    items = sorted(counts.items(), key=lambda kv: -kv[1])
    parts = [f"{k} {100 * v / total:.1f}%" for k, v in items[:top]]
    if len(items) > top:
        parts.append(f"other {100 * sum(v for _, v in items[top:]) / total:.1f}%")
    return ", ".join(parts)

def origin(r):
    return (r.get("origin") or {}).get("requests", "?")

if kind == "fixed":
    label, r = args[0], load(args[1])
    lat = r["latency_ms"]
    print(f"| {label} | {r['qps']:.0f} | {lat['p50']:.3f} | {lat['p99']:.3f} "
          f"| {100 * r['hit_rate']:.1f}% | {r['errors']} |")
elif kind == "herd":
    r = load(args[0])
    lat = r["latency_ms"]
    xc = " ".join(f"{k}={v}" for k, v in sorted(r["x_cache"].items()))
    print(f"| {r['qps']:.0f} | {100 * r['hit_rate']:.1f}% | {origin(r)} | {r['errors']} "
          f"| {lat['p50']:.3f} | {lat['p99']:.3f} | {xc} |")
elif kind == "uniform":
    label, r = args[0], load(args[1])
    lat = r["latency_ms"]
    print(f"| {label} | {r['qps']:.0f} | {lat['p50']:.3f} | {lat['p99']:.3f} "
          f"| {mix(r['x_cache_detail'])} | {origin(r)} | {r['errors']} |")
elif kind == "replicas":
    label, r = args[0], load(args[1])
    l2err, l2drop, trips = open(args[2]).read().split()
    lat, k = r["latency_ms"], r["keys"]
    o = origin(r)
    # Origin requests that no client waited for: background refreshes
    # (stale-while-revalidate). Every plain MISS, 404s included, is one
    # fetch a client saw.
    unseen = o - r["x_cache_detail"].get("MISS", 0) if isinstance(o, int) else "?"
    by = " ".join(f"{n}×:{c}" for n, c in sorted(k["fetched_keys_by_misses"].items(),
                                                 key=lambda kv: int(kv[0].rstrip("+"))))
    print(f"| {label} | {r['qps']:.0f} | {100 * r['hit_rate']:.1f}% | {r['errors']} "
          f"| {lat['p50']:.1f} | {lat['p99']:.1f} | {o} | {k['fetched']} "
          f"| {k['misses_per_fetched_key']:.2f} | {by or '-'} | {unseen} "
          f"| {l2err} failed, {l2drop} dropped, {trips} trips | {mix(r['x_cache_detail'], 5)} |")
elif kind == "roll":
    label, r, base, ready, loaded = args[0], load(args[1]), args[2], args[3], args[4]
    tl = r.get("timeline") or []
    changes = [c for c in r.get("base_changes") or [] if not c.get("error")]
    out_t = next((c["t"] for c in changes if base not in c["bases"]), None)
    back_t = next((c["t"] for c in changes if out_t is not None and c["t"] > out_t and base in c["bases"]), None)
    if out_t is None or back_t is None:
        print(f"| {label} | {ready} s | {loaded} | ? | ? | ? | ? | ? | {r['errors']} "
              "(replica 1 was not taken out and put back during the run) |")
        sys.exit(0)
    def rate(ivs):
        ivs = [iv for iv in ivs if iv.get("origin_requests") is not None]
        secs = sum(iv["seconds"] for iv in ivs)
        return f"{sum(iv['origin_requests'] for iv in ivs) / secs:.0f}" if secs else "?"
    # Before: whole intervals before replica 1 was taken out, after the
    # first second (connections being opened).
    before = [iv for iv in tl if iv["t"] >= 1 and iv["t"] + iv["seconds"] <= out_t]
    during = [iv for iv in tl if iv["t"] >= out_t and iv["t"] + iv["seconds"] <= back_t]
    # After: seconds 0..4 since the new replica was put back; the interval
    # it came back in counts in second 0.
    secs = [[] for _ in range(5)]
    for iv in tl:
        if iv["t"] + iv["seconds"] > back_t:
            j = int(max(iv["t"] - back_t, 0))
            if j < 5:
                secs[j].append(iv)
    def xc(ivs):
        out = {}
        for iv in ivs:
            for k, v in ((iv.get("bases") or {}).get(base, {}).get("x_cache") or {}).items():
                out[k] = out.get(k, 0) + v
        return out
    def l1share(ivs):
        c = xc(ivs)
        n = sum(c.values())
        return f"{100 * c.get('HIT; layer=l1', 0) / n:.0f}%" if n else "-"
    per_s = " ".join(rate(g) for g in secs)
    first3 = xc([iv for g in secs[:3] for iv in g])
    print(f"| {label} | {ready} s | {loaded} | {rate(before)} | {rate(during)} | {per_s} "
          f"| {mix(first3, 4)} | {' '.join(l1share(g) for g in secs)} | {r['errors']} |")
PY
}

step "Building"
"${MAKE:-make}" --no-print-directory build
[[ -x bin/tiercache-sidecar ]] || tc_die "bin/tiercache-sidecar was not built (is cmd/sidecar there?)"
if want 4 || want 5 || want 6; then
  REDIS_SERVER="$(bash hack/ensure-redis.sh)"
fi

# 1. In-process benchmarks.
if want 1; then
  part=1
  step "1. In-process benchmarks (go test -bench, benchtime $BENCHTIME)"
  record go test -run='^$' -bench=. -benchmem -count=1 -benchtime="$BENCHTIME" -timeout="$GO_TIMEOUT" ./internal/...
  if ! go test -run='^$' -bench=. -benchmem -count=1 -benchtime="$BENCHTIME" -timeout="$GO_TIMEOUT" ./internal/... \
    2>&1 | tee "$out/go-bench.txt"; then
    echo "go benchmarks FAILED (see $out/go-bench.txt)"
    status=1
  fi
fi

# 2. HTTP throughput through a warm cache.
sizes=("1 KiB:b1k:1024" "100 KiB:b100k:102400" "1 MiB:b1m:1048576")
if want 2; then
  part=2
  step "2. HTTP throughput, warm cache, concurrency 32, $DURATION per size"
  start_origin throughput-origin
  free_ports 2
  start_sidecar throughput-sidecar "${PORTS[@]}" --upstream "$ORIGIN" --config hack/bench-tier.yaml
  for s in "${sizes[@]}"; do
    IFS=: read -r label key bytes <<<"$s"
    url="$SIDECAR/bytes/$key?size=$bytes&ttl=3600"
    curl -s -o /dev/null --max-time 30 "$url" || tc_die "warming $url failed"
    x="$(x_cache "$url")"
    echo "warmed $url: X-Cache ${x:-none} on the second request"
    [[ "$x" == HIT ]] || echo "warning: $label is not served as a HIT after warming"
  done
  for s in "${sizes[@]}"; do
    IFS=: read -r label key bytes <<<"$s"
    loadgen "fixed-$key" fixed --url "$SIDECAR/bytes/$key?size=$bytes&ttl=3600" --concurrency 32 --duration "$DURATION"
  done
  stop_all
fi

# 3. The herd: a cold cache in front of a slow, narrow origin.
if want 3; then
  part=3
  step "3. Herd: cold sidecar, origin with 90 ms latency and 100 workers, $DURATION"
  start_origin herd-origin --latency 90ms --max-concurrency 100
  free_ports 2
  start_sidecar herd-sidecar "${PORTS[@]}" --upstream "$ORIGIN"
  loadgen herd herd --base "$SIDECAR" --keys 10000 --concurrency 600 --duration "$DURATION" --origin-stats "$ORIGIN/stats"
  stop_all
fi

# 4. Where a hit comes from: L2 (Redis) vs L1 vs no cache at all.
if want 4; then
  part=4
  step "4. L2 hit vs L1 hit vs origin: 2,000 keys of 1 KiB, uniform, concurrency 32, $DURATION each"
  start_redis l2-redis
  start_origin l2-origin
  identity=(--redis-addr "$REDIS_ADDR" --tier bench --pod-namespace bench)
  free_ports 4
  start_sidecar l2-sidecar-a "${PORTS[0]}" "${PORTS[1]}" --upstream "$ORIGIN" "${identity[@]}" --pod-name a
  A="$SIDECAR" A_ADMIN="$SIDECAR_ADMIN"
  start_sidecar l2-sidecar-b "${PORTS[2]}" "${PORTS[3]}" --upstream "$ORIGIN" "${identity[@]}" --pod-name b \
    --config hack/bench-l2-small-l1.yaml
  B="$SIDECAR" B_ADMIN="$SIDECAR_ADMIN"
  # A fills L1 and (asynchronously) Redis; a modest concurrency keeps its
  # L2 write queue from overflowing.
  loadgen l2-fill uniform --base "$A" --host "$HOST" --keys 2000 --fill --concurrency 8 --duration 60s
  n=0
  for _ in $(seq 1 50); do
    n="$(redis_keys)"
    [[ "$n" == "?" || "$n" -ge 2000 ]] && break
    sleep 0.2
  done
  echo "Redis holds $n keys after the fill; sidecar A dropped $(metric "$A_ADMIN" tiercache_l2_dropped_writes_total) L2 writes"
  loadgen l2-b uniform --base "$B" --host "$HOST" --keys 2000 --concurrency 32 --duration "$DURATION" --origin-stats "$ORIGIN/stats"
  loadgen l2-a uniform --base "$A" --host "$HOST" --keys 2000 --concurrency 32 --duration "$DURATION" --origin-stats "$ORIGIN/stats"
  loadgen l2-origin uniform --base "$ORIGIN" --host "$HOST" --keys 2000 --concurrency 32 --duration "$DURATION" --origin-stats "$ORIGIN/stats"
  echo "sidecar B: $(metric "$B_ADMIN" tiercache_l1_entries) entries in its 1 MiB L1, $(metric "$B_ADMIN" tiercache_l1_evictions_total) evictions"
  stop_all
fi

# 5. The herd through 4 replicas sharing one Redis.
if want 5; then
  part=5
  for mode in on off; do
    step "5. Herd through 4 replicas, one Redis, cluster-wide coalescing $mode, $DURATION"
    start_redis "herd4-$mode-redis"
    start_origin "herd4-$mode-origin" --latency 90ms --max-concurrency 100
    config=()
    [[ "$mode" == off ]] && config=(--config hack/bench-no-cluster-coalescing.yaml)
    free_ports 8
    bases=() admins=()
    for i in 1 2 3 4; do
      start_sidecar "herd4-$mode-sidecar-$i" "${PORTS[2 * i - 2]}" "${PORTS[2 * i - 1]}" --upstream "$ORIGIN" \
        --redis-addr "$REDIS_ADDR" --tier herd --pod-namespace bench --pod-name "herd-$i" "${config[@]}"
      bases+=(--base "$SIDECAR")
      admins+=("$SIDECAR_ADMIN")
    done
    loadgen "herd4-$mode" herd "${bases[@]}" --host "$HOST" --keys 10000 --concurrency 600 --duration "$DURATION" \
      --origin-stats "$ORIGIN/stats"
    # How L2 held up: failed calls (mostly timeouts), writes dropped by full
    # queues, and circuit breaker openings, over the 4 replicas.
    l2err=0 l2drop=0 trips=0
    for a in "${admins[@]}"; do
      l2err=$((l2err + $(metric "$a" tiercache_l2_errors_total)))
      l2drop=$((l2drop + $(metric "$a" tiercache_l2_dropped_writes_total)))
    done
    for i in 1 2 3 4; do
      trips=$((trips + $(grep -c 'circuit breaker open' "$out/herd4-$mode-sidecar-$i.log" || true)))
    done
    echo "$l2err $l2drop $trips" >"$out/herd4-$mode-l2"
    echo "L2 over the 4 replicas: $l2err failed calls, $l2drop dropped writes, $trips circuit breaker openings"
    stop_all
  done
fi

# 6. Rolling restart of one of two replicas under steady load.
if want 6; then
  part=6
  for mode in warm cold l1only; do
    case "$mode" in
      warm) what="warm start on (default)" ;;
      cold) what="warm start off" ;;
      l1only) what="no Redis (L1 only)" ;;
    esac
    step "6. Rolling restart, $what: 2 replicas, 5,000 keys, concurrency 64, $ROLL_DURATION"
    start_origin "roll-$mode-origin"
    common=(--upstream "$ORIGIN" --tier roll --pod-namespace bench)
    if [[ "$mode" != l1only ]]; then
      start_redis "roll-$mode-redis"
      common+=(--redis-addr "$REDIS_ADDR")
    fi
    [[ "$mode" == cold ]] && common+=(--config hack/bench-no-warm-start.yaml)
    free_ports 4
    s1=("${PORTS[0]}" "${PORTS[1]}" "${common[@]}" --pod-name roll-1)
    start_sidecar "roll-$mode-sidecar-1" "${s1[@]}"
    S1="$SIDECAR" S1_PID="$SIDECAR_PID"
    start_sidecar "roll-$mode-sidecar-2" "${PORTS[2]}" "${PORTS[3]}" "${common[@]}" --pod-name roll-2
    S2="$SIDECAR"
    # Both replicas warm before the run: replica 1 fetches every key (and
    # writes Redis), replica 2 then reads each once (from Redis when there
    # is one), so the run starts in steady state.
    loadgen "roll-$mode-fill-1" uniform --base "$S1" --host "$HOST" --keys 5000 --fill --concurrency 16 --duration 60s
    loadgen "roll-$mode-fill-2" uniform --base "$S2" --host "$HOST" --keys 5000 --fill --concurrency 16 --duration 60s
    bases_file="$out/roll-$mode-bases"
    write_bases "$bases_file" "$S1" "$S2"
    name="roll-$mode"
    record bin/loadgen uniform --bases-file "$bases_file" --host "$HOST" --keys 5000 --concurrency 64 \
      --duration "$ROLL_DURATION" --interval 250ms --origin-stats "$ORIGIN/stats" --json
    bin/loadgen uniform --bases-file "$bases_file" --host "$HOST" --keys 5000 --concurrency 64 \
      --duration "$ROLL_DURATION" --interval 250ms --origin-stats "$ORIGIN/stats" --json \
      >"$out/$name.json" 2>"$out/$name.txt" &
    lg=$!
    pids+=("$lg")
    t0=$SECONDS
    sleep 5
    # Like Kubernetes: out of the endpoints first, then SIGTERM; the new
    # process gets traffic only once its /readyz says so.
    echo "taking replica 1 out of the load, then restarting it"
    write_bases "$bases_file" "$S2"
    sleep 0.5
    tc_stop "$S1_PID"
    forget "$S1_PID"
    start_sidecar "roll-$mode-sidecar-1" "${s1[@]}"
    echo "new replica 1 ready after $READY_S s (warm start: $mode)"
    ready_s="$READY_S"
    write_bases "$bases_file" "$S1" "$S2"
    if ((SECONDS - t0 > ${ROLL_DURATION%s} - 6)); then
      echo "warning: replica 1 came back late; fewer than 6 s of the run are left to watch it"
    fi
    if ! wait "$lg"; then
      echo "loadgen FAILED (see $out/$name.txt)"
      status=1
    fi
    forget "$lg"
    grep -v '^t=' "$out/$name.txt" || true
    echo "(timeline in $out/$name.txt)"
    # What the new replica's warm start put in its L1 (its last log line).
    loaded="$(grep -o '"msg":"warm start","loaded":[0-9]*' "$out/roll-$mode-sidecar-1.log" | tail -1 | grep -o '[0-9]*$' || true)"
    echo "$ready_s ${loaded:--}" >"$out/$name-new-replica"
    echo "$S1" >"$out/$name-replica-1"
    stop_all
  done
fi

# Summary.
cpu="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then commit="$commit (with uncommitted changes)"; fi
commands() {
  echo
  echo "Commands:"
  echo
  echo '```'
  printf '%s' "${part_cmds[$1]:-}"
  echo '```'
}
{
  echo "## Benchmarks $(date -u +%Y-%m-%d) at $commit"
  echo
  echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(go version | awk '{print $3, $4}'), $(uname -sr)."
  echo "The load generator, the sidecars, Redis and the origin share these cores."
  if want 2; then
    echo
    echo "### HTTP throughput, warm cache (loadgen fixed, concurrency 32, $DURATION)"
    echo
    echo "| body | req/s | p50 ms | p99 ms | served from cache | errors |"
    echo "|---|---:|---:|---:|---:|---:|"
    for s in "${sizes[@]}"; do
      IFS=: read -r label key bytes <<<"$s"
      row fixed "$label" "$out/fixed-$key.json"
    done
    commands 2
  fi
  if want 3; then
    echo
    echo "### Herd (loadgen herd, 10,000 keys, concurrency 600, $DURATION; origin 90 ms, 100 workers; cold start)"
    echo
    echo "| req/s | served from cache (HIT+STALE) | origin requests | errors | p50 ms | p99 ms | X-Cache |"
    echo "|---:|---:|---:|---:|---:|---:|---|"
    row herd "$out/herd.json"
    commands 3
  fi
  if want 4; then
    echo
    echo "### L2 hit vs L1 hit vs origin (loadgen uniform, 2,000 keys of 1 KiB, concurrency 32, $DURATION each)"
    echo
    echo "Sidecar A filled the keys (its L1 and Redis); B has a 1 MiB L1 and no warm start."
    echo
    echo "| served by | req/s | p50 ms | p99 ms | X-Cache | origin requests | errors |"
    echo "|---|---:|---:|---:|---|---:|---:|"
    row uniform "sidecar B: 1 MiB L1 + Redis L2" "$out/l2-b.json"
    row uniform "sidecar A: warm 256 MiB L1" "$out/l2-a.json"
    row uniform "demo-origin, no cache" "$out/l2-origin.json"
    commands 4
  fi
  if want 5; then
    echo
    echo "### Herd through 4 replicas, one Redis (loadgen herd over 4 bases, 10,000 keys, concurrency 600, $DURATION; origin 90 ms, 100 workers; cold start)"
    echo
    echo "\"keys fetched\" counts distinct existing keys some client got a plain MISS for (the replica that answered fetched it),"
    echo "\"misses per key\" those MISSes per such key, \"by misses\" how many keys were fetched 1×, 2×, ...;"
    echo "\"background\" is origin requests no client waited for (stale-while-revalidate refreshes);"
    echo "\"L2 trouble\" sums over the replicas failed L2 calls (timeouts, 50 ms), L2 writes dropped by full queues"
    echo "and circuit breaker openings: while a replica's breaker is open it neither reads Redis nor takes leases."
    echo
    echo "| cluster-wide coalescing | req/s | served from cache | errors | p50 ms | p99 ms | origin requests | keys fetched | misses per key | by misses | background | L2 trouble | X-Cache |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|"
    row replicas "on (default)" "$out/herd4-on.json" "$out/herd4-on-l2"
    row replicas "off" "$out/herd4-off.json" "$out/herd4-off-l2"
    commands 5
  fi
  if want 6; then
    echo
    echo "### Rolling restart (loadgen uniform over 2 replicas, 5,000 keys of 1 KiB, ttl 3600, concurrency 64, $ROLL_DURATION)"
    echo
    echo "Both replicas warm; after 5 s replica 1 leaves the load, is stopped (SIGTERM), started afresh with"
    echo "the same flags and put back once /readyz answers 200. Origin requests per second from demo-origin's"
    echo "/stats, polled every 250 ms; \"after\" are the 5 seconds from the new replica's first traffic, second"
    echo "by second. \"warm start loaded\" is the number of entries the new replica put in its L1 before it said ready."
    echo
    echo "| variant | ready after | warm start loaded | origin req/s before | origin req/s while out | origin req/s after, per second | new replica's X-Cache, first 3 s | its L1-hit share per second | errors |"
    echo "|---|---:|---:|---:|---:|---|---|---|---:|"
    for mode in warm cold l1only; do
      case "$mode" in
        warm) what="warm start on (default)" ;;
        cold) what="warm start off" ;;
        l1only) what="no Redis (L1 only)" ;;
      esac
      read -r ready loaded <"$out/roll-$mode-new-replica"
      row roll "$what" "$out/roll-$mode.json" "$(cat "$out/roll-$mode-replica-1")" "$ready" "$loaded"
    done
    commands 6
  fi
  if [[ -s "$out/go-bench.txt" ]]; then
    echo
    echo "### In-process benchmarks (benchtime $BENCHTIME)"
    echo
    echo '```'
    grep -E '^(Benchmark|pkg:|goos|goarch|cpu:)' "$out/go-bench.txt" || echo "(no benchmarks found)"
    echo '```'
    commands 1
  fi
} >"$out/summary.md"

step "Summary (also in $out/summary.md; raw results beside it)"
cat "$out/summary.md"
exit "$status"
