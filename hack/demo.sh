#!/usr/bin/env bash
# hack/demo.sh — what `make demo` runs: build, start the demo origin and the
# sidecar in front of it on loopback, and show the cache at work:
#
#   GET /hello → X-Cache: MISS, GET /hello → X-Cache: HIT, purge, GET → MISS
#
# Then it prints commands to try and keeps both processes running until
# Ctrl-C. With DEMO_ONESHOT=1 (used by `make test`) it exits after the
# showcase, non-zero unless the requests said MISS, HIT, then MISS after the
# purge.
#
# Ports: DEMO_ORIGIN_PORT (8081), DEMO_PORT (8080), DEMO_ADMIN_PORT (9090);
# with DEMO_ONESHOT=1, free ports unless these are set.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

ONESHOT="${DEMO_ONESHOT:-0}"
READY_TIMEOUT="${DEMO_READY_TIMEOUT:-60}"
if [[ "$ONESHOT" == 1 ]]; then
  # The smoke test takes free ports unless told otherwise, so that a demo
  # left running elsewhere does not fail `make test`.
  default_port() { tc_free_port; }
else
  default_port() { echo "$1"; }
fi
tc_need_cmd curl "${MAKE:-make}"

if [[ -t 1 ]]; then bold=$'\e[1m' green=$'\e[32m' red=$'\e[31m' reset=$'\e[0m'; else bold="" green="" red="" reset=""; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$reset"; }

workdir="$(mktemp -d "${TMPDIR:-/tmp}/tiercache-demo.XXXXXX")"
origin_pid="" sidecar_pid="" interrupted=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  tc_stop $sidecar_pid $origin_pid
  if ((rc != 0)) && [[ -z "$interrupted" ]]; then
    for f in origin sidecar; do
      if [[ -s "$workdir/$f.log" ]]; then
        echo "--- last lines of the $f log ($workdir/$f.log):" >&2
        tail -n 30 "$workdir/$f.log" >&2
      fi
    done
  fi
  rm -rf "$workdir"
  exit "$rc"
}
trap cleanup EXIT
trap 'interrupted=1; echo; echo "stopping the demo"; exit 130' INT
trap 'interrupted=1; exit 143' TERM

say "Building"
"${MAKE:-make}" --no-print-directory build
[[ -x bin/tiercache-sidecar ]] || tc_die "bin/tiercache-sidecar was not built (is cmd/sidecar there?)"

# Ports are chosen after the build, so that nothing can take a free one
# while it runs.
ORIGIN_PORT="${DEMO_ORIGIN_PORT:-$(default_port 8081)}"
PROXY_PORT="${DEMO_PORT:-$(default_port 8080)}"
ADMIN_PORT="${DEMO_ADMIN_PORT:-$(default_port 9090)}"
if [[ "$ORIGIN_PORT" == "$PROXY_PORT" || "$ORIGIN_PORT" == "$ADMIN_PORT" || "$PROXY_PORT" == "$ADMIN_PORT" ]]; then
  tc_die "the origin, sidecar and admin ports must differ ($ORIGIN_PORT, $PROXY_PORT, $ADMIN_PORT)"
fi

ORIGIN="http://127.0.0.1:$ORIGIN_PORT"
PROXY="http://127.0.0.1:$PROXY_PORT"
ADMIN="http://127.0.0.1:$ADMIN_PORT"

for p in "$ORIGIN_PORT" "$PROXY_PORT" "$ADMIN_PORT"; do
  if tc_port_busy "$p"; then
    tc_die "something already listens on 127.0.0.1:$p (another demo?); stop it or choose ports with DEMO_ORIGIN_PORT, DEMO_PORT, DEMO_ADMIN_PORT"
  fi
done

say "Starting the demo origin on $ORIGIN and the sidecar on $PROXY (admin $ADMIN)"
bin/demo-origin --listen "127.0.0.1:$ORIGIN_PORT" >"$workdir/origin.log" 2>&1 &
origin_pid=$!
bin/tiercache-sidecar --upstream "$ORIGIN" --listen "127.0.0.1:$PROXY_PORT" \
  --admin-listen "127.0.0.1:$ADMIN_PORT" >"$workdir/sidecar.log" 2>&1 &
sidecar_pid=$!

tc_wait_http "$ORIGIN/" "$READY_TIMEOUT" "$origin_pid" || tc_die "the demo origin did not come up"
tc_wait_http "$ADMIN/readyz" "$READY_TIMEOUT" "$sidecar_pid" || tc_die "the sidecar did not become ready"
echo "both are up."

# show_get PATH prints the command and the response (headers and body) and
# leaves the first token of its X-Cache header in $xcache.
xcache=""
show_get() {
  local out
  echo
  echo "\$ curl -si $PROXY$1"
  out="$(curl -si --max-time 10 "$PROXY$1")" || tc_die "curl $PROXY$1 failed"
  printf '%s\n' "$out" | tr -d '\r' | sed -E "s/^([Xx]-[Cc]ache:.*)$/$bold\1$reset/"
  xcache="$(printf '%s\n' "$out" | tr -d '\r' | awk 'tolower($0) ~ /^x-cache:/ { sub(/^[^:]*:[ \t]*/, ""); split($0, a, /[;, \t]/); print toupper(a[1]); exit }')"
}

failures=0
expect() { # expect WANT WHAT
  if [[ "$xcache" == "$1" ]]; then
    echo "${green}✔ $2: X-Cache $xcache${reset}"
  else
    echo "${red}✘ $2: expected X-Cache $1, got '${xcache:-none}'${reset}"
    return 1
  fi
}

say "1. The first request goes to the origin"
show_get /hello
expect MISS "first request" || failures=$((failures + 1))

say "2. The second is served from the cache (same body, same time stamp)"
show_get /hello
expect HIT "second request" || failures=$((failures + 1))

say "3. Purge /hello through the admin API"
echo "\$ curl -s -X POST -H 'Content-Type: application/json' -d '{\"urls\":[\"/hello\"]}' $ADMIN/purge"
curl -s --max-time 10 -X POST -H 'Content-Type: application/json' -d '{"urls":["/hello"]}' "$ADMIN/purge" || echo "(purge request failed)"
echo

say "4. After the purge the origin is asked again"
show_get /hello
expect MISS "after purge" || failures=$((failures + 1))

cat <<EOF

${bold}Try it yourself${reset} (the demo keeps running until Ctrl-C):
  curl -si $PROXY/hello                    # max-age=60, HIT until it is stale
  curl -si $PROXY/time                     # max-age=5: watch HIT turn into a refresh
  curl -si $PROXY/private                  # Cache-Control: private, never stored
  curl -si $PROXY/tagged/red               # Surrogate-Key: demo red
  curl -s -X POST -d '{"tags":["red"]}' $ADMIN/purge
  curl -si "$PROXY/bytes/k1?size=100000&ttl=30"
  curl -si -X POST $PROXY/hello            # an unsafe method invalidates /hello
  curl -s $ADMIN/metrics | grep ^tiercache_
  curl -s $ORIGIN/stats                    # how many requests reached the origin
  curl -s $ORIGIN/                         # the origin's routes
EOF

if [[ "$ONESHOT" == 1 ]]; then
  if ((failures)); then
    echo "${red}demo smoke test FAILED: the sidecar did not answer MISS, HIT, then MISS after the purge${reset}" >&2
    exit 1
  fi
  echo "${green}demo smoke test passed${reset}"
  exit 0
fi

echo
echo "Logs: $workdir/origin.log, $workdir/sidecar.log. Press Ctrl-C to stop."
# Returns when either process exits (or on Ctrl-C, through the trap).
wait -n "$origin_pid" "$sidecar_pid" || true
tc_die "a demo process exited on its own"
