#!/usr/bin/env bash
# hack/demo-cluster.sh — what `make demo-cluster` runs: Tiercache in real
# pods on a real single-node Kubernetes cluster (test/testnode), in one
# command. It installs what the node needs (hack/node-tools.sh,
# hack/k8s-tools.sh, hack/ensure-redis.sh: idempotent, cached), builds the
# plugin, bin/democluster and the images (make image), and runs
# bin/democluster (tools/democluster), which starts the node inside a
# network namespace of its own, loads the images, installs the chart with
# its bundled Redis, applies a CacheTier, deploys the demo origin
# annotated with tiercache.io/tier behind a Service, and shows
#
#   GET /hello → X-Cache: MISS, GET /hello → X-Cache: HIT, purge, GET → MISS
#
# through that Service. Then it prints commands to try and keeps the
# cluster up until Ctrl-C, when it tears everything down.
#
# With DEMO_CLUSTER_ONESHOT=1 (make demo-cluster-smoke) it tears down right
# after the showcase, exits non-zero unless the Service answered MISS, HIT,
# then MISS after the purge, and then checks that the run left nothing on
# the machine: no process, mount, cgroup, link or directory of its own, no
# change to the machine's iptables rules or to the sysctls kubelet sets.
#
# Needs Linux, root and namespaces (unshare, nsenter), curl.
# DEMO_CLUSTER_VERSION is the images' tag and DEMO_CLUSTER_LDFLAGS the
# version stamp of the binaries (make passes its VERSION and its -X flags).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

ONESHOT="${DEMO_CLUSTER_ONESHOT:-0}"
VERSION="${DEMO_CLUSTER_VERSION:?set DEMO_CLUSTER_VERSION (make demo-cluster sets it)}"
MAKE="${MAKE:-make}"
GO="${GO:-go}"
# make passes the version stamp make build uses.
LDFLAGS="${DEMO_CLUSTER_LDFLAGS:-}"

[[ "$(uname -s)" == Linux ]] || tc_die "make demo-cluster needs Linux (network and mount namespaces, cgroups); make demo runs anywhere"
((EUID == 0)) || tc_die "make demo-cluster needs root: it creates network and mount namespaces and cgroups (everything stays inside them); run it as root, or use make demo"
[[ -e /proc/self/ns/net ]] || tc_die "make demo-cluster needs network namespaces (/proc/self/ns/net is missing)"
tc_need_cmd curl nsenter unshare ip ldd "$MAKE" "$GO"

if [[ -t 1 ]]; then bold=$'\e[1m' reset=$'\e[0m'; else bold="" reset=""; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$reset"; }

say "Installing the node's tools into the tool cache (first run: about 20 min on 2 cores; cached after)"
node_env="$(bash hack/node-tools.sh env)"
k8s_env="$(bash hack/k8s-tools.sh env)"
set -a
eval "$node_env"
eval "$k8s_env"
set +a
redis_server="$(bash hack/ensure-redis.sh)"
redis_cli="$(bash hack/ensure-redis.sh cli)"

say "Building the binaries and the images (VERSION=$VERSION)"
build_log="$(mktemp "${TMPDIR:-/tmp}/tiercache-demo-cluster-build.XXXXXX")"
trap 'rm -f "$build_log"' EXIT
# Only the two commands run here (as make build builds them), then the
# images.
for cmd in cmd/kubectl-tiercache tools/democluster; do
  if ! CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$LDFLAGS" -o "bin/${cmd#*/}" "./$cmd" >"$build_log" 2>&1; then
    cat "$build_log" >&2
    tc_die "building $cmd failed"
  fi
done
if ! "$MAKE" --no-print-directory image VERSION="$VERSION" >"$build_log" 2>&1; then
  cat "$build_log" >&2
  tc_die "make image failed"
fi
rm -f "$build_log"
trap - EXIT
ls bin/image/*-"$VERSION"-linux-*.oci.tar

args=(-version "$VERSION" -images bin/image -chart charts/tiercache -plugin bin/kubectl-tiercache
  -helm "$HELM" -redis-server "$redis_server" -redis-cli "$redis_cli")

if [[ "$ONESHOT" != 1 ]]; then
  # democluster handles ^C itself: it tears the cluster down, then exits.
  exec bin/democluster "${args[@]}"
fi

# --- the smoke test ----------------------------------------------------------

# What of a run with this pid could be left on the machine, and the
# machine's own iptables rules (the node writes its rules inside its
# namespace only).
leftovers() {
  local pid="$1" tmp="${TMPDIR:-/tmp}"
  ls -d "$tmp/tiercache-node-$pid" "$tmp/tiercache-demo-cluster-$pid" 2>/dev/null || true
  ls -d /sys/fs/cgroup/*/"tiercache-node-$pid" /sys/fs/cgroup/"tiercache-node-$pid" 2>/dev/null || true
  grep -F "tiercache-node-$pid" /proc/self/mountinfo || true
  ip -o link show | grep -F "tcn$pid" || true
  # Processes: started from the node's work directory, or with it in
  # their command line.
  local p cmd
  for p in /proc/[0-9]*; do
    cmd="$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null || true)"
    if [[ "$(readlink "$p/cwd" 2>/dev/null)" == "$tmp/tiercache-node-$pid"* || "$cmd" == *"tiercache-node-$pid"* ]]; then
      echo "process ${p#/proc/}: $cmd"
    fi
  done
}
iptables_rules() {
  if command -v iptables-save >/dev/null; then { iptables-save 2>/dev/null || true; } | sed -E -e '/^#/d' -e 's/\[[0-9]+:[0-9]+\]//' | sort; fi
}

# The machine-wide sysctls kubelet sets (test/testnode puts them back,
# the last of overlapping nodes does): compared only when no other node
# ran at either end.
sysctls() { cat /proc/sys/vm/overcommit_memory /proc/sys/vm/panic_on_oom /proc/sys/kernel/panic /proc/sys/kernel/panic_on_oops; }
other_nodes() { compgen -G "${TMPDIR:-/tmp}/tiercache-node-*" || true; }

rules_before="$(iptables_rules)"
sysctls_before="$(sysctls)" others_before="$(other_nodes)"
start=$SECONDS
bin/democluster -oneshot "${args[@]}" &
pid=$!
rc=0
wait "$pid" || rc=$?
echo "democluster exited $rc after $((SECONDS - start))s"
left="$(leftovers "$pid")"
rules_after="$(iptables_rules)"
if [[ -n "$left" ]]; then
  echo "demo-cluster smoke test FAILED: the run left this behind:" >&2
  echo "$left" >&2
  rc=1
fi
sysctls_after="$(sysctls)" others_after="$(other_nodes)"
if [[ -z "$others_before$others_after" && "$sysctls_before" != "$sysctls_after" ]]; then
  echo "demo-cluster smoke test FAILED: the machine's sysctls changed (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops):" >&2
  diff <(echo "$sysctls_before") <(echo "$sysctls_after") >&2 || true
  rc=1
fi
if [[ "$rules_before" != "$rules_after" ]]; then
  echo "demo-cluster smoke test FAILED: the machine's iptables rules changed:" >&2
  diff <(echo "$rules_before") <(echo "$rules_after") >&2 || true
  rc=1
fi
((rc == 0)) && echo "the machine is as it was: no process, mount, cgroup, link, directory, iptables rule or sysctl left"
exit "$rc"
