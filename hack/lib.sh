# shellcheck shell=bash
# hack/lib.sh — helpers shared by the scripts in hack/. Source it, don't run it:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Tools that tests and the demo need are installed on first use into a cache
# outside the repository, one directory per tool and version:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/tiercache/<tool>-<version>/
#
# An install builds into a temporary directory next to its final place, moves
# it there, and writes a `.done` marker last, all under a flock, so parallel
# runs wait for each other and an interrupted install is redone rather than
# half-used. The marker holds the Go version for Go tools: a toolchain upgrade
# rebuilds them.

# Everything is prefixed tc_ so that sourcing scripts keep their own names.

TC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TC_LOCK_TIMEOUT="${TC_LOCK_TIMEOUT:-900}"

tc_log() { printf '%s\n' "$*" >&2; }
tc_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# tc_need_cmd CMD... fails unless every CMD is on PATH.
tc_need_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || tc_die "'$c' is required but not on PATH"
  done
}

# tc_cache_root prints (and creates) the cache directory for all tools.
tc_cache_root() {
  local root="${XDG_CACHE_HOME:-$HOME/.cache}/tiercache"
  mkdir -p "$root"
  printf '%s\n' "$root"
}

# tc_cache_dir NAME VERSION prints the install directory of one tool version.
# It does not say whether that directory is complete: see tc_is_installed.
tc_cache_dir() {
  printf '%s/%s-%s\n' "$(tc_cache_root)" "$1" "$2"
}

# tc_is_installed DIR [STAMP] succeeds when DIR holds a finished install
# whose .done marker says STAMP (any marker when STAMP is empty).
tc_is_installed() {
  local dir="$1" stamp="${2:-}"
  [[ -f "$dir/.done" ]] || return 1
  [[ -z "$stamp" ]] && return 0
  [[ "$(cat "$dir/.done")" == "$stamp" ]]
}

# tc_with_lock NAME CMD... runs CMD with an exclusive lock named NAME in the
# cache root, waiting at most TC_LOCK_TIMEOUT seconds for it.
tc_with_lock() {
  local name="$1"; shift
  local lock
  lock="$(tc_cache_root)/.${name}.lock"
  if ! command -v flock >/dev/null 2>&1; then
    tc_log "warning: flock not found; running without a lock"
    "$@"
    return
  fi
  (
    flock -w "$TC_LOCK_TIMEOUT" 9 || tc_die "timed out after ${TC_LOCK_TIMEOUT}s waiting for $lock"
    "$@"
  ) 9>"$lock"
}

# tc_install NAME VERSION STAMP BUILD_FN [ARGS...] makes sure NAME-VERSION is
# installed and prints its directory. When it is not (or its marker is not
# STAMP), BUILD_FN is called as `BUILD_FN TMPDIR ARGS...` to fill TMPDIR,
# which then replaces the install directory; the .done marker is written last.
tc_install() {
  local name="$1" version="$2" stamp="$3" build="$4"; shift 4
  local dir
  dir="$(tc_cache_dir "$name" "$version")"
  if ! tc_is_installed "$dir" "$stamp"; then
    tc_with_lock "$name-$version" _tc_install_locked "$dir" "$stamp" "$build" "$@" || return 1
  fi
  printf '%s\n' "$dir"
}

_tc_install_locked() {
  local dir="$1" stamp="$2" build="$3"; shift 3
  # Another run may have finished while we waited for the lock.
  tc_is_installed "$dir" "$stamp" && return 0
  # Leftovers of an install that was killed; nobody else builds while we
  # hold the lock.
  rm -rf "$dir".tmp.*
  local tmp
  tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
  chmod 755 "$tmp"
  tc_log "installing $(basename "$dir") into $dir"
  if ! "$build" "$tmp" "$@"; then
    rm -rf "$tmp"
    tc_die "installing $(basename "$dir") failed"
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  printf '%s\n' "${stamp:-done}" >"$dir/.done"
}

# tc_install_go_tool NAME MODULE/PATH@VERSION installs a Go command from the
# Go module proxy with `go install` and prints the path of its binary,
# <cache>/NAME-VERSION/bin/NAME. It is rebuilt when the Go toolchain changes.
tc_install_go_tool() {
  local name="$1" spec="$2"
  [[ "$spec" == *@* ]] || tc_die "tc_install_go_tool: $spec has no @version"
  tc_need_cmd go
  local version="${spec##*@}" gover dir
  gover="$(go env GOVERSION)"
  dir="$(tc_install "$name" "$version" "$gover" _tc_go_install "$spec")" || return 1
  [[ -x "$dir/bin/$name" ]] || tc_die "$dir/bin/$name missing after install of $spec"
  printf '%s\n' "$dir/bin/$name"
}

_tc_go_install() {
  local tmp="$1" spec="$2"
  mkdir -p "$tmp/bin"
  # Outside the repository so that its go.mod and any go.work play no part.
  (cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS='' go install "$spec")
}

# tc_apt_install CMD PACKAGE... makes sure CMD is on PATH, installing the
# Debian PACKAGEs non-interactively when it is not, and prints CMD's path.
# Services that the packages ship are not started.
tc_apt_install() {
  local cmd="$1"; shift
  if ! command -v "$cmd" >/dev/null 2>&1; then
    tc_with_lock apt _tc_apt_install_locked "$cmd" "$@" || return 1
  fi
  command -v "$cmd" || tc_die "$cmd still not on PATH after installing $*"
}

_tc_apt_install_locked() {
  local cmd="$1"; shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || tc_die "$cmd is not installed and apt-get is not available; install $* by hand"
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || tc_die "installing $* needs root or sudo"
    sudo=(sudo -n)
  fi
  # A policy-rc.d that says 101 keeps package scripts from starting services.
  local policy=/usr/sbin/policy-rc.d made_policy=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made_policy=1
  fi
  local rc=0
  tc_log "installing Debian packages: $*"
  {
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        -o DPkg::Lock::Timeout=300 --no-install-recommends "$@"
  } </dev/null >&2 || rc=$?
  if [[ -n "$made_policy" ]]; then "${sudo[@]}" rm -f "$policy"; fi
  return "$rc"
}

# tc_free_port prints a TCP port on 127.0.0.1 that nothing listens on now.
# (Another process may take it before the caller does; callers start their
# server at once and fail loudly if it cannot listen.)
tc_free_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    if ! tc_port_busy "$port"; then
      printf '%s\n' "$port"
      return 0
    fi
  done
  tc_die "no free port found on 127.0.0.1"
}

# tc_port_busy PORT succeeds when something accepts connections on
# 127.0.0.1:PORT.
tc_port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# tc_wait_http URL TIMEOUT_SECONDS [PID] waits until URL answers 200, at most
# TIMEOUT_SECONDS; it gives up early when PID (the server) has exited.
tc_wait_http() {
  local url="$1" timeout="$2" pid="${3:-}"
  local deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      tc_log "process $pid exited while waiting for $url"
      return 1
    fi
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" 2>/dev/null)" == 200 ]]; then
      return 0
    fi
    sleep 0.2
  done
  tc_log "timed out after ${timeout}s waiting for $url"
  return 1
}

# tc_stop PID... sends SIGTERM to each PID, waits up to 10 seconds for them
# to exit, then SIGKILLs what is left. Only for processes this script started.
# (Written with `if`s: a failing `kill` must not trip `set -e` in a trap.)
tc_stop() {
  local pid alive deadline=$((SECONDS + 10))
  for pid in "$@"; do
    if [[ -n "$pid" ]]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  while ((SECONDS < deadline)); do
    alive=""
    for pid in "$@"; do
      if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    if [[ -z "$alive" ]]; then break; fi
    sleep 0.1
  done
  for pid in "$@"; do
    if [[ -n "$pid" ]]; then
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  return 0
}
