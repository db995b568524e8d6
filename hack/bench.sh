#!/usr/bin/env bash
# hack/bench.sh — what `make bench` runs. Nine parts, results under
# bench-results/<time>/ and a summary ready to paste into docs/benchmarks.md.
# nginx (Debian's package, unpacked into the tool cache with wrk by
# hack/ensure-nginx.sh) is the yardstick of parts 2, 3 and 8: it runs next
# to the sidecar in the same run, in front of the same origin, the two
# measured in turn (Tiercache, nginx, Tiercache, nginx, ... BENCH_REPS
# times), and the summary gives medians and every figure as a ratio to
# nginx's.
#
#   1. in-process Go benchmarks of ./internal/... (go test -bench)
#   2. warm hits, Tiercache vs nginx: 1 KiB, 100 KiB and 1 MiB bodies with
#      `wrk -t2 -c64 --latency`; then 1 KiB and 100 KiB with each server pinned to core 0
#      (nginx with one worker) and wrk to core 1; req/s, p50/p99 and server
#      CPU µs per request (/proc utime+stime: the sidecar's process, nginx's
#      master and workers; the origin is not counted); the sidecar with its
#      body store (hack/bench-tier-bodystore.yaml) when the binary has one
#   3. the herd, Tiercache (hack/bench-herd-tier.yaml) vs nginx: a slow
#      origin (90 ms, 100 workers), a cold cache, `loadgen herd` (10,000
#      keys, 600 concurrency); origin requests by class and slow answers by
#      X-Cache say where the tail and the origin load come from
#   4. L2 hit vs L1 hit vs origin: one Redis; sidecar A fills 2,000 × 1 KiB
#      keys; sidecar B (1 MiB L1, no warm start) serves uniform traffic over
#      them, mostly from Redis; the same load on A (L1 hits) and straight at
#      the origin (no cache)
#   5. the herd through 4 replicas sharing one Redis, cluster-wide
#      coalescing on (default) and off
#   6. rolling restart: 2 replicas under steady load; replica 1 is taken out,
#      stopped, started afresh with the same flags, and put back once ready;
#      with warm start, without it, and without Redis (L1 only)
#   7. memory: `loadgen flood` (a new 1 KiB key every request) into a sidecar
#      with l1.maxSize 64Mi (hack/bench-flood-tier.yaml), its VmRSS sampled
#      every 250 ms; target RSS <= L1 bound + 64 MiB
#   8. a 100 MiB object the origin sends at 50 MiB/s, Tiercache vs nginx:
#      on a cold key, does the first body byte reach the client before the
#      origin is done; then a hit's MB/s. The sidecar gets its body store
#      (--body-dir, hack/bench-large-tier.yaml) when the binary has one;
#      without it the object passes through uncached
#   9. the browser-mix replay (`loadgen replay`, issue 29): the same seeded
#      requests of browsers, crawlers and tools (analytics and session
#      cookies, compressing origin: demo-origin's /site/) against Tiercache
#      with its defaults and with hack/bench-replay-tier.yaml (docs/caching.md's
#      settings for a typical site), Varnish with its built-in VCL and with
#      hack/bench-replay-varnish.vcl (cookie and query normalizing), and
#      nginx proxy_cache with gzip on; from-cache share, origin requests and
#      bytes, bytes to clients, CPU per request; fails on any leak of a
#      signed-in visitor's page to another client
#
# Everything listens on free loopback ports and is stopped on exit; nginx's
# cache and the sidecar's body directory live in a temporary directory on
# /dev/shm (tmpfs) when there is one, removed on exit. Unless pinned, the
# load generator runs on the same cores as the servers and the origin.
# Replicas are reached on their own ports, so loadgen sends one Host header
# to all (--host), as clients of a Service do: the host is part of the key.
#
# Knobs: BENCH_DURATION (10s, parts 2–5), BENCH_REPS (2, parts 2, 3, 8),
# BENCHTIME (go test -benchtime, 1s), BENCH_GO_TIMEOUT (3m), BENCH_PARTS
# (which parts, "1 2 3 4 5 6 7 8 9"), BENCH_SKIP_GO=1 (skip part 1),
# BENCH_ROLL_DURATION (20s, part 6), BENCH_FLOOD_DURATION (60s, part 7),
# BENCH_LARGE_SIZE (104857600 bytes) and BENCH_LARGE_RATE (52428800 B/s,
# part 8), BENCH_BODY_STORE (1; 0 runs parts 2 and 8 without the body
# store), BENCH_ACCESS_LOG (0: the sidecars run with --access-log=false,
# as nginx runs with access_log off; 1 logs every request to the part's
# log file), BENCH_REPLAY_REQUESTS (30000), BENCH_REPLAY_SEED (1),
# BENCH_REPLAY_CONCURRENCY (16) and BENCH_REPLAY_TARGETS (all five, part
# 9), BENCH_RESULTS (bench-results).
#
# A full run takes about 10 minutes on 2 cores (part 7 alone 1, part 2 3,
# part 9 about 2).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

DURATION="${BENCH_DURATION:-10s}"
BENCHTIME="${BENCHTIME:-1s}"
GO_TIMEOUT="${BENCH_GO_TIMEOUT:-3m}"
PARTS=" ${BENCH_PARTS:-1 2 3 4 5 6 7 8 9} "
if [[ "${BENCH_SKIP_GO:-0}" == 1 ]]; then PARTS="${PARTS/ 1 / }"; fi
ROLL_DURATION="${BENCH_ROLL_DURATION:-20s}"
REPS="${BENCH_REPS:-2}"
FLOOD_DURATION="${BENCH_FLOOD_DURATION:-60s}"
LARGE_SIZE="${BENCH_LARGE_SIZE:-104857600}"
LARGE_RATE="${BENCH_LARGE_RATE:-52428800}"
REPLAY_REQUESTS="${BENCH_REPLAY_REQUESTS:-30000}"
REPLAY_SEED="${BENCH_REPLAY_SEED:-1}"
REPLAY_CONCURRENCY="${BENCH_REPLAY_CONCURRENCY:-16}"
read -ra REPLAY_TARGETS <<<"${BENCH_REPLAY_TARGETS:-tiercache-defaults tiercache-recommended varnish-builtin varnish-normalizing nginx-gzip}"
[[ "$REPLAY_REQUESTS" =~ ^[1-9][0-9]*$ && "$REPLAY_CONCURRENCY" =~ ^[1-9][0-9]*$ && "$REPLAY_SEED" =~ ^[0-9]+$ ]] ||
  tc_die "BENCH_REPLAY_REQUESTS, BENCH_REPLAY_CONCURRENCY: want positive integers; BENCH_REPLAY_SEED: an integer"
for t in "${REPLAY_TARGETS[@]}"; do
  case "$t" in
    tiercache-defaults | tiercache-recommended | varnish-builtin | varnish-normalizing | nginx-gzip) ;;
    *) tc_die "BENCH_REPLAY_TARGETS: unknown target '$t' (tiercache-defaults, tiercache-recommended, varnish-builtin, varnish-normalizing, nginx-gzip)" ;;
  esac
done
[[ "$REPS" =~ ^[1-9][0-9]?$ ]] || tc_die "BENCH_REPS: want 1..99, got '$REPS'"
[[ "$FLOOD_DURATION" =~ ^[1-9][0-9]*s$ ]] || tc_die "BENCH_FLOOD_DURATION: want seconds like 60s, got '$FLOOD_DURATION'"
[[ "$LARGE_SIZE" =~ ^[1-9][0-9]*$ && "$LARGE_RATE" =~ ^[1-9][0-9]*$ ]] ||
  tc_die "BENCH_LARGE_SIZE, BENCH_LARGE_RATE: want positive integers (bytes, bytes/s)"
# human_bytes N prints N bytes as "<n> MiB" when a whole number of MiB.
human_bytes() {
  if (($1 % 1048576 == 0)); then echo "$(($1 / 1048576)) MiB"; else echo "$1 bytes"; fi
}
LARGE_LABEL="$(human_bytes "$LARGE_SIZE")" RATE_LABEL="$(human_bytes "$LARGE_RATE")/s"
NCPU="$(nproc)"
CLK_TCK="$(getconf CLK_TCK)"
# The L1 bound of part 7 (hack/bench-flood-tier.yaml's l1.maxSize).
FLOOD_L1_BOUND=$((64 << 20))
READY_TIMEOUT=60
# The Host header every replica sees (parts 4–6), like a Service's name.
HOST=web.bench.svc

tc_need_cmd go curl python3 awk "${MAKE:-make}"

out="${BENCH_RESULTS:-bench-results}/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
# nginx's caches and the sidecar's body directory: tmpfs when there is one.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  BENCH_TMP="$(mktemp -d /dev/shm/tiercache-bench.XXXXXX)"
else
  BENCH_TMP="$(mktemp -d "$PWD/$out/tmp.XXXXXX")"
fi
SIDECAR_PREFIX=() # a command the sidecar runs under (taskset -c 0 in part 2)
declare -A part_cmds=() # part number → every measuring command, as run
part=0
status=0

pids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  tc_stop "${pids[@]}"
  rm -rf "$BENCH_TMP"
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
  # nginx runs with access_log off (the issue 12 fair fight); so does the
  # sidecar unless BENCH_ACCESS_LOG=1.
  local args=(--listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$aport"
    --access-log="$([[ "${BENCH_ACCESS_LOG:-0}" == 1 ]] && echo true || echo false)" "$@")
  SIDECAR="http://127.0.0.1:$port" SIDECAR_ADMIN="http://127.0.0.1:$aport"
  record "${SIDECAR_PREFIX[@]}" bin/tiercache-sidecar "${args[@]}"
  local t0=$EPOCHREALTIME
  "${SIDECAR_PREFIX[@]}" bin/tiercache-sidecar "${args[@]}" >>"$out/$label.log" 2>&1 &
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
# redis-cli cannot tell).
redis_keys() {
  "$REDIS_CLI" -h 127.0.0.1 -p "${REDIS_ADDR##*:}" dbsize 2>/dev/null || echo "?"
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
elif kind == "replay":
    label, r = args[0], load(args[1])
    o = r.get("origin") or {}
    li = r.get("logged_in") or {}
    mb = lambda b: f"{b / 1e6:,.1f} MB"
    cpu = f"{r['cpu_per_request_us']:.0f}" if r.get("cpu_per_request_us") else "?"
    anon = f"{li.get('anonymous', 0)} ({li.get('anonymous_from_cache', 0)} from cache)"
    personal = f"{li.get('personal', 0)} ({li.get('personal_from_cache', 0)} from cache)"
    leaks = r["leaks"] if r["leaks"] == 0 else f"**{r['leaks']}**"
    print(f"| {label} | {r['requests']} | {100 * r['hit_rate']:.1f}% | {o.get('requests', '?')} "
          f"| {mb(o['bytes']) if 'bytes' in o else '?'} | {mb(r['client_bytes'])} | {cpu} "
          f"| {li.get('requests', 0)} | {personal} | {anon} | {leaks} | {r['errors']} |")
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
elif kind == "hits":
    # hits LABEL PREFIX REPS HZ: wrk runs $PREFIX-{tiercache,nginx}-{1..REPS}
    import re, statistics
    label, prefix, reps, hz = args[0], args[1], int(args[2]), int(args[3])
    def unit(v, u):
        return float(v) * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4}[u]
    def wrk(name):
        text = open(f"{name}.wrk").read()
        ticks = int(open(f"{name}.ticks").read())
        n = int(re.search(r"(\d+) requests in", text).group(1))
        rps = float(re.search(r"Requests/sec:\s*([\d.]+)", text).group(1))
        lat = {q: unit(v, u) for q, v, u in re.findall(r"^\s*(50|99)%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M)}
        errs = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
        errs += int(non2xx.group(1)) if non2xx else 0
        return {"rps": rps, "p50": lat.get("50"), "p99": lat.get("99"), "cpu": ticks * 1e6 / hz / n, "errors": errs}
    def med(server):
        runs = []
        for i in range(1, reps + 1):
            try:
                runs.append(wrk(f"{prefix}-{server}-{i}"))
            except (OSError, AttributeError, ValueError):
                pass
        if not runs:
            return None
        return {k: statistics.median(r[k] for r in runs) if k != "errors" else sum(r[k] for r in runs)
                for k in runs[0]}
    t, n = med("tiercache"), med("nginx")
    if not t or not n:
        print(f"| {label} | (missing runs) |||||||||")
        sys.exit(0)
    r = lambda a, b: f"{a / b:.2f}×" if b else "?"
    print(f"| {label} | {t['rps']:,.0f} | {n['rps']:,.0f} | **{r(t['rps'], n['rps'])}** "
          f"| {t['p50']:.2f} / {t['p99']:.2f} | {n['p50']:.2f} / {n['p99']:.2f} | {r(t['p99'], n['p99'])} "
          f"| {t['cpu']:.1f} | {n['cpu']:.1f} | **{r(t['cpu'], n['cpu'])}** | {t['errors']:.0f} / {n['errors']:.0f} |")
elif kind == "herdvs":
    # herdvs DIR REPS: loadgen herd results herd-{tiercache,nginx}-{1..REPS}.json
    import statistics
    d, reps = args[0], int(args[1])
    def runs(server):
        out = []
        for i in range(1, reps + 1):
            try:
                out.append(load(f"{d}/herd-{server}-{i}.json"))
            except OSError:
                pass
        return out
    def med(rs, f):
        return statistics.median(f(x) for x in rs) if rs else float("nan")
    def slow(x):
        return sum(x.get("slow_x_cache", {}).values())
    cols = {
        "rps": lambda x: x["qps"], "cache": lambda x: 100 * x["hit_rate"],
        "origin": lambda x: (x.get("origin") or {}).get("requests", float("nan")),
        "errors": lambda x: x["errors"], "p50": lambda x: x["latency_ms"]["p50"],
        "p99": lambda x: x["latency_ms"]["p99"], "slow": slow,
    }
    res = {}
    for server, name in (("tiercache", "Tiercache"), ("nginx", "nginx")):
        rs = runs(server)
        res[server] = {k: med(rs, f) for k, f in cols.items()}
        m = res[server]
        xc = {}
        for x in rs:
            for k, v in x["x_cache"].items():
                xc[k] = xc.get(k, 0) + v
        print(f"| {name} | {m['rps']:,.0f} | {m['cache']:.1f}% | {m['origin']:,.0f} | {m['errors']:.0f} "
              f"| {m['p50']:.1f} | {m['p99']:.1f} | {m['slow']:,.0f} | {mix(xc, 5)} |")
    t, n = res["tiercache"], res["nginx"]
    r = lambda k: f"{t[k] / n[k]:.2f}×" if n[k] else "-"
    print(f"| **ratio** | **{r('rps')}** | {t['cache'] - n['cache']:+.1f} pts | {r('origin')} | "
          f"| {r('p50')} | **{r('p99')}** | {r('slow')} | |")
elif kind == "herdwhy":
    # herdwhy FILE...: where the origin requests and the slow answers came from
    for path in args:
        x = load(path)
        o = (x.get("origin") or {}).get("by_class") or {}
        sl = x.get("slow_x_cache") or {}
        name = path.rsplit("/", 1)[-1].removesuffix(".json")
        oc = ", ".join(f"{k} {v:,}" for k, v in sorted(o.items(), key=lambda kv: -kv[1])) or "?"
        sc = ", ".join(f"{k} {v:,}" for k, v in sorted(sl.items(), key=lambda kv: -kv[1])) or "none"
        org = x.get("origin") or {}
        answered = sum(o.values())
        # Client fetches: answers the server fetched for (Tiercache's plain
        # MISS, nginx's MISS and EXPIRED); the other answered origin
        # requests no client waited for: background refreshes.
        fetches = sum(v for k, v in x["x_cache_detail"].items() if k in ("MISS", "EXPIRED"))
        bg = answered - fetches
        per = f"{1000 * bg / x['responses']:.1f}" if x["responses"] else "?"
        print(f"| {name} | {oc} | {org.get('requests', '?'):,} / {answered:,} | {org.get('max_inflight', '?'):,} "
              f"| {fetches:,} | {bg:,} | {per} | {sc} |")
elif kind == "fresh":
    name, x = args[0], load(args[1])
    if not x.get("trials"):
        print(f"| {name} | ? | (no result) |")
        sys.exit(0)
    per = ", ".join(f"+{t['offset']:.2f} → {t['fresh_s']:.2f}" for t in x["trials"])
    print(f"| {name} | {x['mean_s']:.2f} | {per} |")
elif kind == "flood":
    # flood DIR L1_BOUND_BYTES
    d, bound = args[0], int(args[1])
    samples = [int(l.split()[1]) * 1024 for l in open(f"{d}/flood-samples.rss") if l.strip()]
    base = [int(l.split()[1]) * 1024 for l in open(f"{d}/flood-baseline.rss") if l.strip()]
    end = dict(l.split(":", 1) for l in open(f"{d}/flood-end.status") if ":" in l)
    hwm = int(end.get("VmHWM", "0 kB").split()[0]) * 1024
    m = dict(l.split() for l in open(f"{d}/flood-metrics") if l.strip())
    entries, l1bytes, evictions = float(m["entries"]), float(m["bytes"]), float(m["evictions"])
    r = load(f"{d}/flood.json")
    peak = max(samples + [hwm]) if samples or hwm else 0
    mib = lambda b: f"{b / 2**20:,.1f} MiB"
    over = peak - bound
    per = f"{over / entries:,.0f} B" if entries else "?"
    ok = "yes" if peak <= bound + 64 * 2**20 else "**no**"
    print(f"| {mib(bound)} | {r['requests']:,} ({r['qps']:,.0f}/s, {r['errors']} errors) | {mib(base[0]) if base else '?'} "
          f"| {mib(max(samples)) if samples else '?'} | {mib(hwm)} | {entries:,.0f} ({mib(l1bytes)}) | {evictions:,.0f} "
          f"| {mib(over)} | {per} | {ok} |")
elif kind == "large":
    # large DIR REPS SERVER NAME
    import statistics
    d, reps, server, name = args[0], int(args[1]), args[2], args[3]
    cold, hit, done = [], [], []
    for i in range(1, reps + 1):
        try:
            c, h = load(f"{d}/large-{server}-{i}-cold.json"), load(f"{d}/large-{server}-{i}-hit.json")
            o = load(f"{d}/large-{server}-{i}-cold.origin")
        except (OSError, ValueError):
            continue
        if not c or not h:
            continue
        cold.append(c)
        hit.append(h)
        pd = o.get("paced_done_unix_ns") or 0
        done.append((pd - c["started_unix_ns"]) / 1e9 if pd else float("nan"))
    if not cold:
        print(f"| {name} | (no runs) ||||||")
        sys.exit(0)
    med = statistics.median
    fb = med(c["first_byte_s"] for c in cold)
    od = med(done)
    before = all(c["first_byte_unix_ns"] and (c["first_byte_s"] < dd) for c, dd in zip(cold, done))
    xcold = "/".join(sorted({c["x_cache"] for c in cold}))
    xhit = "/".join(sorted({h["x_cache"] for h in hit}))
    mbps = med(h["mb_per_s"] for h in hit)
    print(f"| {name} | {xcold} | {fb:.3f} | {od:.3f} | {'yes' if before else '**no**'} | {med(c['total_s'] for c in cold):.2f} "
          f"| {xhit} | {mbps:,.0f} MB/s ({mbps / 1000:.2f} GB/s) |")
PY
}

# --- nginx, the yardstick (parts 2, 3, 8) ---------------------------------

# nginx_conf DIR WORKERS PORT ORIGIN_HOSTPORT CACHE_DIR prints the config of
# a benchmark nginx: everything it writes stays under DIR and CACHE_DIR.
# Chosen for a fair fight with the sidecar (issue 12):
# - the cache on a tmpfs (CACHE_DIR is under /dev/shm when there is one),
#   hits sent with sendfile; tcp_nopush off (on, it holds 100 KiB hits back
#   by about 40 ms each over loopback);
# - keep-alive to the origin (upstream keepalive, HTTP/1.1, no
#   "Connection: close"), and to clients without nginx's default cap of
#   1,000 requests per connection (the sidecar has none);
# - one worker per core (WORKERS), no access log;
# - the herd: one fetch per key (proxy_cache_lock), stale answers while it
#   refreshes in the background (use_stale updating + background_update;
#   nginx honours the origin's stale-while-revalidate too), 200 and 404
#   without caching headers kept 1 s (the sidecar's negativeTTL: 1s). The
#   lock's timeout and age are 10 s, the sidecar's coalescing.timeout: a
#   waiter fetches for itself after that long on both;
# - keys_zone of 64 MiB (about 500,000 keys; 8,000 per MiB) and max_size
#   8 GiB: nothing the benchmark stores is evicted.
# Responses that are cached are written whole to the cache whatever their
# size (proxy_max_temp_file_size does not apply to them), so the 100 MiB
# object of part 8 is cached with the defaults; use_temp_path=off writes
# it straight into the cache directory.
nginx_conf() {
  local dir="$1" workers="$2" port="$3" origin="$4" cache="$5"
  # Run as root, nginx would start its workers as "nobody", who could not
  # write the cache and temp directories this script (root) made: keep
  # them root. Not root, the workers run as the user anyway.
  if [[ "$(id -u)" == 0 ]]; then echo "user root;"; fi
  cat <<EOF
worker_processes $workers;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
  worker_connections 4096;
}
http {
  access_log off;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush off;
  tcp_nodelay on;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  client_body_temp_path $dir/client_body;
  proxy_temp_path $dir/proxy_temp;
  fastcgi_temp_path $dir/fastcgi_temp;
  uwsgi_temp_path $dir/uwsgi_temp;
  scgi_temp_path $dir/scgi_temp;
  proxy_cache_path $cache levels=1:2 keys_zone=bench:64m max_size=8g inactive=1h use_temp_path=off;
  upstream origin {
    server $origin;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$port backlog=4096;
    location = /nginx-ready {
      return 200 "ready\n";
    }
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache bench;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 10s;
      proxy_cache_lock_age 10s;
      proxy_cache_use_stale updating error timeout;
      proxy_cache_background_update on;
      proxy_cache_valid 200 404 1s;
      add_header X-Cache \$upstream_cache_status always;
    }
  }
}
EOF
}

# start_nginx LABEL WORKERS [CPU] starts nginx (pinned to CPU when given)
# in front of ORIGIN with an empty cache on a free port, waits until it
# answers, and sets NGINX (its URL) and NGINX_PID (its master). Config, pid
# and error log in $out/nginx/LABEL/, stdout and stderr in $out/LABEL.log.
start_nginx() {
  local label="$1" workers="$2" cpu="${3:-}"
  local dir="$PWD/$out/nginx/$label" cache
  mkdir -p "$dir"/{client_body,proxy_temp,fastcgi_temp,uwsgi_temp,scgi_temp}
  cache="$(mktemp -d "$BENCH_TMP/nginx-cache-$label.XXXXXX")"
  free_ports 1
  NGINX="http://127.0.0.1:${PORTS[0]}"
  nginx_conf "$dir" "$workers" "${PORTS[0]}" "${ORIGIN#http://}" "$cache" >"$dir/nginx.conf"
  local cmd=("$NGINX_BIN" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log")
  if [[ -n "$cpu" ]]; then cmd=(taskset -c "$cpu" "${cmd[@]}"); fi
  record "${cmd[@]}"
  "${cmd[@]}" >"$out/$label.log" 2>&1 &
  NGINX_PID=$!
  pids+=("$NGINX_PID")
  tc_wait_http "$NGINX/nginx-ready" "$READY_TIMEOUT" "$NGINX_PID" ||
    tc_die "nginx did not come up (see $out/$label.log and $dir/error.log)"
}

# --- the replay's nginx and Varnish (part 9) --------------------------------

# nginx_replay_conf DIR PORT ORIGIN_HOSTPORT CACHE_DIR prints the config of
# part 9's nginx: proxy_cache with gzip on, as nginx users front a site.
# The origin is asked for identity (Accept-Encoding cleared), so one copy
# is stored per URL and gzip compresses it for each client that accepts
# gzip, on every answer; with the origin always asked the same way, its
# Vary: Accept-Encoding is ignored (proxy_ignore_headers Vary). Requests
# with the session cookie pass the cache and are not stored
# (proxy_cache_bypass / proxy_no_cache $cookie_sid), the usual pattern of
# nginx's docs for signed-in users; the key holds the Host
# ($scheme$host$request_uri). The rest as part 2's nginx: one worker per
# core, keep-alive both ways, cache on tmpfs, no access log.
nginx_replay_conf() {
  local dir="$1" port="$2" origin="$3" cache="$4"
  if [[ "$(id -u)" == 0 ]]; then echo "user root;"; fi
  cat <<EOF
worker_processes $NCPU;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
  worker_connections 4096;
}
http {
  access_log off;
  default_type application/octet-stream;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  client_body_temp_path $dir/client_body;
  proxy_temp_path $dir/proxy_temp;
  fastcgi_temp_path $dir/fastcgi_temp;
  uwsgi_temp_path $dir/uwsgi_temp;
  scgi_temp_path $dir/scgi_temp;
  gzip on;
  gzip_vary on;
  gzip_proxied any;
  gzip_comp_level 5;
  gzip_min_length 256;
  gzip_types text/css text/javascript application/javascript application/json image/svg+xml;
  proxy_cache_path $cache levels=1:2 keys_zone=replay:64m max_size=1g inactive=1h use_temp_path=off;
  upstream origin {
    server $origin;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$port backlog=4096;
    location = /nginx-ready {
      return 200 "ready\n";
    }
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header Accept-Encoding "";
      proxy_ignore_headers Vary;
      proxy_cache replay;
      proxy_cache_key \$scheme\$host\$request_uri;
      proxy_cache_bypass \$cookie_sid;
      proxy_no_cache \$cookie_sid;
      proxy_cache_lock on;
      proxy_cache_use_stale updating error timeout;
      proxy_cache_background_update on;
      add_header X-Cache \$upstream_cache_status always;
    }
  }
}
EOF
}

# start_nginx_replay LABEL starts part 9's nginx in front of ORIGIN, cold,
# and sets NGINX and NGINX_PID.
start_nginx_replay() {
  local label="$1" dir="$PWD/$out/nginx/$1" cache
  mkdir -p "$dir"/{client_body,proxy_temp,fastcgi_temp,uwsgi_temp,scgi_temp}
  cache="$(mktemp -d "$BENCH_TMP/nginx-cache-$label.XXXXXX")"
  free_ports 1
  NGINX="http://127.0.0.1:${PORTS[0]}"
  nginx_replay_conf "$dir" "${PORTS[0]}" "${ORIGIN#http://}" "$cache" >"$dir/nginx.conf"
  record "$NGINX_BIN" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log"
  "$NGINX_BIN" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" >"$out/$label.log" 2>&1 &
  NGINX_PID=$!
  pids+=("$NGINX_PID")
  tc_wait_http "$NGINX/nginx-ready" "$READY_TIMEOUT" "$NGINX_PID" ||
    tc_die "nginx did not come up (see $out/$label.log and $dir/error.log)"
}

# start_varnish LABEL VCL starts varnishd (hack/ensure-varnish.sh's) in
# front of ORIGIN with VCL (its __ORIGIN_HOST__ and __ORIGIN_PORT__ filled
# in) and 256 MiB of malloc storage (the sidecar's default l1.maxSize), in
# the foreground, its working directory under $out/varnish/LABEL; sets
# VARNISH (its URL) and VARNISH_PID (the manager). Ready once a request
# through it reaches the origin's index.
start_varnish() {
  local label="$1" vcl="$2" dir="$PWD/$out/varnish/$1" hp="${ORIGIN#http://}"
  mkdir -p "$dir"
  sed -e "s/__ORIGIN_HOST__/${hp%:*}/" -e "s/__ORIGIN_PORT__/${hp##*:}/" "$vcl" >"$dir/site.vcl"
  free_ports 1
  VARNISH="http://127.0.0.1:${PORTS[0]}"
  local args=(-F -n "$dir/work" -a "127.0.0.1:${PORTS[0]}" -f "$dir/site.vcl"
    -p "vmod_path=$VARNISH_VMODS" -s malloc,256m)
  if [[ "$(id -u)" == 0 ]]; then args+=(-j none); fi
  record "$VARNISHD" "${args[@]}"
  "$VARNISHD" "${args[@]}" >"$out/$label.log" 2>&1 &
  VARNISH_PID=$!
  pids+=("$VARNISH_PID")
  tc_wait_http "$VARNISH/" "$READY_TIMEOUT" "$VARNISH_PID" ||
    tc_die "varnishd did not come up (see $out/$label.log)"
}

# warm URL... requests each URL, then again, and says whether the second
# answer was a HIT.
warm() {
  local url x
  for url in "$@"; do
    curl -s -o /dev/null --max-time 60 "$url" || tc_die "warming $url failed"
    x="$(x_cache "$url")"
    echo "warmed $url: X-Cache ${x:-none} on the second request"
    [[ "$x" == HIT ]] || echo "warning: $url is not served as a HIT after warming"
  done
}

# proc_ticks PID... prints the CPU time (user + system, in clock ticks) the
# processes have used, summed; processes that are gone count 0.
proc_ticks() {
  local p line a s=0
  for p in "$@"; do
    if read -r line <"/proc/$p/stat" 2>/dev/null; then
      read -ra a <<<"${line##*) }" # fields from the 3rd on: utime is the 14th, stime the 15th
      s=$((s + a[11] + a[12]))
    fi
  done
  echo "$s"
}

# server_pids NAME PID prints the processes whose CPU counts as the
# server's: the sidecar itself, nginx's master and its children
# (workers, cache manager and loader), or varnishd's manager and its
# child (the cache process).
server_pids() {
  echo "$2"
  if [[ "$1" == nginx || "$1" == varnish ]]; then pgrep -P "$2" || true; fi
}

# wrk_run NAME URL SERVER PID [PREFIX...] runs wrk (-t2 -c64, $DURATION,
# with latency percentiles) against URL, under PREFIX (e.g. taskset -c 1),
# and keeps its output in $out/NAME.wrk and the server's CPU ticks over the
# run in $out/NAME.ticks.
wrk_run() {
  local name="$1" url="$2" server="$3" pid="$4"; shift 4
  local procs t0 t1
  mapfile -t procs < <(server_pids "$server" "$pid")
  t0="$(proc_ticks "${procs[@]}")"
  record "$@" wrk -t2 -c64 -d"$DURATION" --latency "$url"
  if ! "$@" "$WRK_BIN" -t2 -c64 -d"$DURATION" --latency "$url" >"$out/$name.wrk" 2>&1; then
    echo "wrk FAILED (see $out/$name.wrk)"
    status=1
  fi
  t1="$(proc_ticks "${procs[@]}")"
  echo "$((t1 - t0))" >"$out/$name.ticks"
  wrk_line "$name"
}

# wrk_line NAME prints one line about the wrk run NAME.
wrk_line() {
  python3 - "$out/$1.wrk" "$out/$1.ticks" "$CLK_TCK" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ticks, hz, name = int(open(sys.argv[2]).read()), int(sys.argv[3]), sys.argv[4]
m = re.search(r"(\d+) requests in", text)
rps = re.search(r"Requests/sec:\s*([\d.]+)", text)
n = int(m.group(1)) if m else 0
cpu = f"{ticks * 1e6 / hz / n:.1f}" if n else "?"
print(f"{name}: {rps.group(1) if rps else '?'} req/s, {n} requests, server CPU {cpu} µs/request")
PY
}

# rss_sample PID prints "<unix time> <VmRSS in kB>" for PID.
rss_sample() {
  awk -v t="$EPOCHREALTIME" '/^VmRSS:/ { print t, $2 }' "/proc/$1/status" 2>/dev/null || true
}

# get_one NAME URL fetches URL once with loadgen get, the JSON in
# $out/NAME.json (shown as text).
get_one() {
  local name="$1" url="$2"
  record bin/loadgen get --url "$url" --json
  if ! bin/loadgen get --url "$url" --json >"$out/$name.json" 2> >(tee "$out/$name.txt" >&2); then
    echo "loadgen get FAILED (see $out/$name.txt)"
    echo '{}' >"$out/$name.json"
    status=1
  fi
}

step "Building"
"${MAKE:-make}" --no-print-directory build
[[ -x bin/tiercache-sidecar ]] || tc_die "bin/tiercache-sidecar was not built (is cmd/sidecar there?)"
# Part 1's packages (internal/store and its tests' harness, test/testredis)
# need redis-server too: the harness only finds it, never installs it, and
# runs the one TIERCACHE_REDIS_SERVER names. Both from the tool cache.
if want 1 || want 4 || want 5 || want 6; then
  REDIS_SERVER="$(bash hack/ensure-redis.sh)"
  REDIS_CLI="$(bash hack/ensure-redis.sh cli)"
  export TIERCACHE_REDIS_SERVER="$REDIS_SERVER"
fi
if want 2 || want 3 || want 8 || want 9; then
  { read -r NGINX_BIN; read -r WRK_BIN; } < <(bash hack/ensure-nginx.sh)
  [[ -x "$NGINX_BIN" && -x "$WRK_BIN" ]] || tc_die "hack/ensure-nginx.sh did not give nginx and wrk"
  echo "nginx: $("$NGINX_BIN" -v 2>&1), wrk: $WRK_BIN"
  if want 2; then tc_need_cmd taskset; fi
  tc_need_cmd pgrep
fi
if want 9; then
  { read -r VARNISHD; read -r _; read -r _; read -r VARNISH_VMODS; } < <(bash hack/ensure-varnish.sh)
  [[ -x "$VARNISHD" && -d "$VARNISH_VMODS" ]] || tc_die "hack/ensure-varnish.sh did not give varnishd and its vmods"
  echo "varnish: $("$VARNISHD" -V 2>&1 | head -1)"
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

# The body store (issue 12 §2): the sidecars of parts 2 and 8 keep bodies
# above 64 KiB in files on the tmpfs (as nginx's cache is), each sidecar in
# its own directory, unless BENCH_BODY_STORE=0 (bodies in L1's memory, or
# passed through above l1.maxEntrySize, as before the body store).
HAS_BODY_STORE=1
if [[ "${BENCH_BODY_STORE:-1}" == 0 ]]; then HAS_BODY_STORE=""; fi

# body_store LABEL CONFIG CONFIG_WITH_BODY_STORE sets BODY_ARGS to the
# sidecar flags: --config CONFIG, or, with a body store, the body store's
# flags and --config CONFIG_WITH_BODY_STORE.
body_store() {
  if [[ -n "$HAS_BODY_STORE" ]]; then
    mkdir -p "$BENCH_TMP/bodies-$1"
    BODY_ARGS=(--body-dir "$BENCH_TMP/bodies-$1" --body-dir-size 2Gi --config "$3")
  elif [[ -n "$2" ]]; then
    BODY_ARGS=(--config "$2")
  else
    BODY_ARGS=()
  fi
}
if [[ -n "$HAS_BODY_STORE" ]]; then
  BODY_STORE_NOTE="on: --body-dir on the tmpfs, bodies above 64 KiB in files"
else
  BODY_STORE_NOTE="off (BENCH_BODY_STORE=0)"
fi

# 2. Warm hits, Tiercache vs nginx, interleaved.
sizes=("1 KiB:b1k:1024" "100 KiB:b100k:102400" "1 MiB:b1m:1048576")
if want 2; then
  part=2
  step "2. Warm hits, Tiercache vs nginx: wrk -t2 -c64 -d$DURATION, $REPS repetitions interleaved"
  start_origin hits-origin
  free_ports 2
  body_store hits-sidecar hack/bench-tier.yaml hack/bench-tier-bodystore.yaml
  start_sidecar hits-sidecar "${PORTS[@]}" --upstream "$ORIGIN" "${BODY_ARGS[@]}"
  start_nginx hits-nginx "$(nproc)"
  servers=("tiercache|$SIDECAR|$SIDECAR_PID" "nginx|$NGINX|$NGINX_PID")
  for s in "${sizes[@]}"; do
    IFS=: read -r label key bytes <<<"$s"
    warm "$SIDECAR/bytes/$key?size=$bytes&ttl=3600" "$NGINX/bytes/$key?size=$bytes&ttl=3600"
  done
  for rep in $(seq 1 "$REPS"); do
    for s in "${sizes[@]}"; do
      IFS=: read -r label key bytes <<<"$s"
      for srv in "${servers[@]}"; do
        IFS="|" read -r name base pid <<<"$srv"
        wrk_run "hits-$key-$name-$rep" "$base/bytes/$key?size=$bytes&ttl=3600" "$name" "$pid"
      done
    done
  done
  stop_all

  # The same 1 KiB and 100 KiB hits with the server pinned to core 0 and
  # wrk to core 1 (nginx with one worker; the sidecar's Go runtime sees
  # one CPU and runs one P, as the injector's GOMAXPROCS makes it in a
  # container limited to one core). The origin is not pinned: warm hits
  # never reach it.
  pinned_sizes=("1 KiB:b1k:1024" "100 KiB:b100k:102400")
  step "2. Warm 1 KiB and 100 KiB hits, server pinned to core 0, wrk to core 1, $REPS repetitions interleaved"
  if ((NCPU < 2)); then
    echo "skipped: pinning needs 2 cores, this machine has $NCPU"
  else
    start_origin pinned-origin
    free_ports 2
    SIDECAR_PREFIX=(taskset -c 0)
    body_store pinned-sidecar hack/bench-tier.yaml hack/bench-tier-bodystore.yaml
    start_sidecar pinned-sidecar "${PORTS[@]}" --upstream "$ORIGIN" "${BODY_ARGS[@]}"
    SIDECAR_PREFIX=()
    start_nginx pinned-nginx 1 0
    servers=("tiercache|$SIDECAR|$SIDECAR_PID" "nginx|$NGINX|$NGINX_PID")
    for s in "${pinned_sizes[@]}"; do
      IFS=: read -r label key bytes <<<"$s"
      warm "$SIDECAR/bytes/$key?size=$bytes&ttl=3600" "$NGINX/bytes/$key?size=$bytes&ttl=3600"
    done
    for rep in $(seq 1 "$REPS"); do
      for s in "${pinned_sizes[@]}"; do
        IFS=: read -r label key bytes <<<"$s"
        for srv in "${servers[@]}"; do
          IFS="|" read -r name base pid <<<"$srv"
          wrk_run "pinned-$key-$name-$rep" "$base/bytes/$key?size=$bytes&ttl=3600" "$name" "$pid" taskset -c 1
        done
      done
    done
    stop_all
  fi
fi

# 3. The herd: a cold cache in front of a slow, narrow origin, Tiercache
# and nginx in turn, each cold, each with a fresh origin of the same flags.
if want 3; then
  part=3
  # How long each serves a max-age=1 response as fresh: the herd's hot
  # keys are refreshed once per that time. A quick origin, 8 trials spread
  # over a second.
  step "3. Freshness of a max-age=1 response, Tiercache vs nginx"
  start_origin fresh-origin
  free_ports 2
  start_sidecar fresh-sidecar "${PORTS[@]}" --upstream "$ORIGIN" --config hack/bench-herd-tier.yaml
  start_nginx fresh-nginx "$NCPU"
  for srv in "tiercache|$SIDECAR" "nginx|$NGINX"; do
    IFS="|" read -r name base <<<"$srv"
    record bin/loadgen freshness --base "$base" --trials 8 --ttl 1 --json
    bin/loadgen freshness --base "$base" --trials 8 --ttl 1 --json >"$out/fresh-$name.json" 2> >(tee "$out/fresh-$name.txt" >&2) ||
      { echo "loadgen freshness FAILED (see $out/fresh-$name.txt)"; echo '{}' >"$out/fresh-$name.json"; status=1; }
  done
  stop_all
  for rep in $(seq 1 "$REPS"); do
    for name in tiercache nginx; do
      step "3. Herd ($name, repetition $rep): cold cache, origin with 90 ms latency and 100 workers, $DURATION"
      start_origin "herd-$name-$rep-origin" --latency 90ms --max-concurrency 100
      if [[ "$name" == tiercache ]]; then
        free_ports 2
        start_sidecar "herd-$name-$rep-sidecar" "${PORTS[@]}" --upstream "$ORIGIN" --config hack/bench-herd-tier.yaml
        base="$SIDECAR"
      else
        start_nginx "herd-$name-$rep-nginx" "$NCPU"
        base="$NGINX"
      fi
      loadgen "herd-$name-$rep" herd --base "$base" --keys 10000 --concurrency 600 --duration "$DURATION" \
        --origin-stats "$ORIGIN/stats" --interval 1s
      stop_all
    done
  done
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

# 7. Memory under a flood of distinct URLs.
if want 7; then
  part=7
  step "7. Memory: a flood of distinct 1 KiB URLs into a sidecar with l1.maxSize 64Mi, $FLOOD_DURATION"
  start_origin flood-origin
  free_ports 2
  start_sidecar flood-sidecar "${PORTS[@]}" --upstream "$ORIGIN" --config hack/bench-flood-tier.yaml
  # Baseline: a few samples after start, before any load.
  rss_sample "$SIDECAR_PID" >"$out/flood-baseline.rss"
  record bin/loadgen flood --base "$SIDECAR" --concurrency 64 --duration "$FLOOD_DURATION" --json
  bin/loadgen flood --base "$SIDECAR" --concurrency 64 --duration "$FLOOD_DURATION" --json \
    >"$out/flood.json" 2>"$out/flood.txt" &
  lg=$!
  pids+=("$lg")
  # VmRSS every 250 ms while the flood runs (bounded by its duration and a
  # deadline of twice that plus a minute).
  deadline=$((SECONDS + 2 * ${FLOOD_DURATION%s} + 60))
  : >"$out/flood-samples.rss"
  while kill -0 "$lg" 2>/dev/null && ((SECONDS < deadline)); do
    rss_sample "$SIDECAR_PID" >>"$out/flood-samples.rss"
    sleep 0.25
  done
  if ! wait "$lg"; then
    echo "loadgen FAILED (see $out/flood.txt)"
    status=1
  fi
  forget "$lg"
  cat "$out/flood.txt"
  grep -E '^Vm(HWM|RSS):' "/proc/$SIDECAR_PID/status" >"$out/flood-end.status" || true
  {
    echo "entries $(metric "$SIDECAR_ADMIN" tiercache_l1_entries)"
    echo "bytes $(metric "$SIDECAR_ADMIN" tiercache_l1_bytes)"
    echo "evictions $(metric "$SIDECAR_ADMIN" tiercache_l1_evictions_total)"
  } >"$out/flood-metrics"
  cat "$out/flood-end.status" "$out/flood-metrics"
  stop_all
fi

# 8. A 100 MiB object sent slowly by the origin: does its first byte reach
# the client before the origin is done (cold), and how fast does a hit
# stream? Tiercache keeps such a body in its body store when the binary
# has one (--body-dir); without it the body passes through uncached.
if want 8; then
  part=8
  body_store large-sidecar "" hack/bench-large-tier.yaml
  step "8. A $LARGE_LABEL object at $RATE_LABEL from the origin: cold, then hits; Tiercache (body store $BODY_STORE_NOTE) vs nginx"
  start_origin large-origin
  free_ports 2
  start_sidecar large-sidecar "${PORTS[@]}" --upstream "$ORIGIN" "${BODY_ARGS[@]}"
  start_nginx large-nginx "$NCPU"
  for rep in $(seq 1 "$REPS"); do
    for srv in "tiercache:$SIDECAR" "nginx:$NGINX"; do
      name="${srv%%:*}" base="${srv#*:}"
      url="$base/bytes/large$rep?size=$LARGE_SIZE&ttl=3600&rate=$LARGE_RATE"
      curl -s -o /dev/null -X POST --max-time 5 "$ORIGIN/stats/reset"
      get_one "large-$name-$rep-cold" "$url"
      curl -s --max-time 5 "$ORIGIN/stats" >"$out/large-$name-$rep-cold.origin"
      get_one "large-$name-$rep-hit" "$url"
    done
  done
  stop_all
fi

# 9. The browser-mix replay (issue 29): the same seeded requests, on the
# same origin (demo-origin's /site/), against Tiercache (defaults, then
# the settings docs/caching.md recommends for a typical site,
# hack/bench-replay-tier.yaml), Varnish (built-in VCL, then the
# normalizing VCL its users deploy, hack/bench-replay-varnish*.vcl) and
# nginx (proxy_cache with gzip on). Each target starts cold; the origin
# stays (its counters are reset by loadgen before each run). loadgen fails
# the run when any answer carries another session's marker.
if want 9; then
  part=9
  step "9. Browser-mix replay: $REPLAY_REQUESTS requests (seed $REPLAY_SEED, concurrency $REPLAY_CONCURRENCY) against ${REPLAY_TARGETS[*]}"
  start_origin replay-origin
  for target in "${REPLAY_TARGETS[@]}"; do
    case "$target" in
      tiercache-defaults)
        free_ports 2
        start_sidecar replay-tiercache-defaults "${PORTS[@]}" --upstream "$ORIGIN"
        base="$SIDECAR" procs=("$SIDECAR_PID") ;;
      tiercache-recommended)
        free_ports 2
        start_sidecar replay-tiercache-recommended "${PORTS[@]}" --upstream "$ORIGIN" --config hack/bench-replay-tier.yaml
        base="$SIDECAR" procs=("$SIDECAR_PID") ;;
      varnish-builtin | varnish-normalizing)
        vcl=hack/bench-replay-varnish.vcl
        if [[ "$target" == varnish-builtin ]]; then vcl=hack/bench-replay-varnish-builtin.vcl; fi
        start_varnish "replay-$target" "$vcl"
        base="$VARNISH"
        mapfile -t procs < <(server_pids varnish "$VARNISH_PID") ;;
      nginx-gzip)
        start_nginx_replay replay-nginx-gzip
        base="$NGINX"
        mapfile -t procs < <(server_pids nginx "$NGINX_PID") ;;
    esac
    cpu_args=()
    for p in "${procs[@]}"; do cpu_args+=(--cpu-pid "$p"); done
    if ! loadgen "replay-$target" replay --base "$base" --origin-stats "$ORIGIN/stats" \
      --requests "$REPLAY_REQUESTS" --seed "$REPLAY_SEED" --concurrency "$REPLAY_CONCURRENCY" \
      --duration 10m "${cpu_args[@]}"; then
      echo "replay against $target FAILED (see $out/replay-$target.txt)"
      status=1
    fi
    # The cache stops; the next target starts cold, on the same origin.
    for p in "${pids[@]}"; do
      if [[ "$p" != "$ORIGIN_PID" ]]; then
        tc_stop "$p"
        forget "$p"
      fi
    done
  done
  stop_all
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
  echo "The load generator, the sidecars, nginx, Redis and the origin share these cores (unless pinned)."
  if want 2; then
    echo
    echo "### Warm hits, Tiercache vs nginx (wrk -t2 -c64 -d$DURATION --latency, medians of $REPS interleaved runs)"
    echo
    echo "Ratios are Tiercache / nginx: req/s above 1 and p99 or CPU per request below 1 favour Tiercache."
    echo "CPU is the server's user + system time over the run (/proc: the sidecar; nginx's master and workers),"
    echo "divided by the requests wrk completed; the origin is not counted. Pinned: the server on core 0 (nginx"
    echo "with 1 worker), wrk on core 1. Errors are wrk's socket errors and non-2xx answers, summed over the runs."
    echo "Tiercache's body store: $BODY_STORE_NOTE."
    echo
    echo "| warm hit | Tiercache req/s | nginx req/s | req/s ratio | Tiercache p50 / p99 ms | nginx p50 / p99 ms | p99 ratio | Tiercache CPU µs/req | nginx CPU µs/req | CPU/req ratio | errors T / n |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for s in "${sizes[@]}"; do
      IFS=: read -r label key bytes <<<"$s"
      row hits "$label, unpinned" "$out/hits-$key" "$REPS" "$CLK_TCK"
    done
    if ((NCPU >= 2)); then
      row hits "1 KiB, server pinned to one core" "$out/pinned-b1k" "$REPS" "$CLK_TCK"
      row hits "100 KiB, server pinned to one core" "$out/pinned-b100k" "$REPS" "$CLK_TCK"
    fi
    commands 2
  fi
  if want 3; then
    echo
    echo "### Herd, Tiercache vs nginx (loadgen herd, 10,000 keys, concurrency 600, $DURATION; origin 90 ms, 100 workers; cold start; medians of $REPS interleaved runs)"
    echo
    echo "Tiercache with hack/bench-herd-tier.yaml (staleWhileRevalidate 1h, negativeTTL 1s), nginx with"
    echo "proxy_cache_lock, use_stale updating, background_update, proxy_cache_valid 200 404 1s. Served from"
    echo "cache: answered without an origin request of its own: X-Cache HIT or STALE, nginx's UPDATING, and"
    echo "Tiercache's \"; coalesced\" answers (they waited on another request's fetch, as nginx's proxy_cache_lock"
    echo "waiters do, which nginx reports as HIT); a plain MISS, REVALIDATED, nginx's EXPIRED are not. Slow: answers"
    echo "that took 100 ms or more. The ratio row is Tiercache / nginx (from cache: the difference in points)."
    echo
    echo "| server | req/s | served from cache | origin requests | errors | p50 ms | p99 ms | slow answers | X-Cache (all runs) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
    row herdvs "$out" "$REPS"
    echo
    echo "Where the origin requests and the slow answers come from, run by run: origin requests by route,"
    echo "conditional or not, and status (demo-origin's /stats counts a request there once answered); arrived /"
    echo "answered (the difference was still queued or in flight at the end); the most it held at once, queued"
    echo "for one of its 100 slots or served; client fetches (X-Cache MISS, nginx's EXPIRED too); background"
    echo "refreshes (answered origin requests no client waited for), also per 1,000 answers; answers of 100 ms"
    echo "or more by X-Cache."
    echo
    echo "| run | origin requests by class | arrived / answered | max at the origin at once | client fetches | background | per 1,000 answers | slow answers by X-Cache |"
    echo "|---|---|---:|---:|---:|---:|---:|---|"
    herd_files=()
    for rep in $(seq 1 "$REPS"); do herd_files+=("$out/herd-tiercache-$rep.json" "$out/herd-nginx-$rep.json"); done
    row herdwhy "${herd_files[@]}"
    echo
    echo "How long a response with max-age=1 is served as a HIT (loadgen freshness: 8 new keys, fetched at"
    echo "0, 1/8, ... 7/8 of a wall-clock second, polled every 10 ms until the answer is not a HIT):"
    echo
    echo "| server | mean seconds as HIT | per trial (fetched at +s → HIT for s) |"
    echo "|---|---:|---|"
    row fresh Tiercache "$out/fresh-tiercache.json"
    row fresh nginx "$out/fresh-nginx.json"
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
  if want 7; then
    echo
    echo "### Memory under a flood of distinct URLs (loadgen flood, 1 KiB bodies, concurrency 64, $FLOOD_DURATION; l1.maxSize 64Mi)"
    echo
    echo "RSS is the sidecar's VmRSS sampled every 250 ms, and its VmHWM (peak) at the end; entries and L1"
    echo "bytes from its metrics at the end. Overhead = peak RSS − the L1 bound; per entry = overhead / entries"
    echo "held. Target: peak RSS ≤ L1 bound + 64 MiB."
    echo
    echo "| L1 bound | requests (new keys) | baseline RSS | peak sampled RSS | VmHWM | entries held (L1 bytes) | evictions | overhead | per entry | within target |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    row flood "$out" "$FLOOD_L1_BOUND"
    commands 7
  fi
  if want 8; then
    echo
    echo "### A $LARGE_LABEL object sent by the origin at $RATE_LABEL (loadgen get; medians of $REPS runs)"
    echo
    echo "Cold: a key neither server holds; \"first byte\" is the first body byte at the client and \"origin"
    echo "done\" when demo-origin finished sending (its /stats), both in seconds since the request. Hit: the"
    echo "same URL again at once. MB/s are 10^6 bytes per second over loopback. Tiercache's body store:"
    echo "$BODY_STORE_NOTE (without it the object passes through uncached)."
    echo
    echo "| server | cold X-Cache | cold: first byte s | origin done s | first byte first | cold: last byte s | hit X-Cache | hit speed |"
    echo "|---|---|---:|---:|---|---:|---|---:|"
    row large "$out" "$REPS" tiercache "Tiercache (body store ${BODY_STORE_NOTE%%:*})"
    row large "$out" "$REPS" nginx nginx
    commands 8
  fi
  if want 9; then
    echo
    echo "### Browser-mix replay ($REPLAY_REQUESTS requests of seed $REPLAY_SEED, concurrency $REPLAY_CONCURRENCY, each target cold, one origin)"
    echo
    echo "loadgen replay: Zipf over 3,000 URLs (pages, API answers, CSS/JS, images) on two hosts, headers of"
    echo "tools/loadgen/clients.json's browsers, crawlers and tools, analytics cookies on most browser requests,"
    echo "15% of browser visitors signed in (cookie sid), tracking parameters on 10% of browsers' page requests;"
    echo "demo-origin's /site/ compresses (br, gzip) with Vary: Accept-Encoding. From cache: X-Cache HIT, STALE or"
    echo "UPDATING. Origin requests and body bytes from demo-origin's /stats; bytes to clients as sent (compressed"
    echo "or not); CPU: the server's user + system time (/proc: the sidecar; nginx's and varnishd's processes) per"
    echo "request. Signed in: page and API requests of signed-in visitors, answered with their own page (personal)"
    echo "or the anonymous one, and how many of each the server said came from its cache. Leaks: answers"
    echo "carrying another session's page (the run fails on any)."
    echo
    echo "| target | requests | from cache | origin requests | origin bytes | bytes to clients | CPU µs/req | signed-in page/API requests | personal | anonymous | leaks | errors |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for t in "${REPLAY_TARGETS[@]}"; do
      case "$t" in
        tiercache-defaults) what="Tiercache, defaults" ;;
        tiercache-recommended) what="Tiercache, recommended settings (hack/bench-replay-tier.yaml)" ;;
        varnish-builtin) what="Varnish, built-in VCL" ;;
        varnish-normalizing) what="Varnish, normalizing VCL (hack/bench-replay-varnish.vcl)" ;;
        nginx-gzip) what="nginx proxy_cache, gzip on" ;;
      esac
      if [[ -s "$out/replay-$t.json" ]]; then row replay "$what" "$out/replay-$t.json"; else echo "| $what | (failed: see replay-$t.txt) |"; fi
    done
    commands 9
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
