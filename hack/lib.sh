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
# rebuilds them. Debian packages (redis-server, nginx, wrk, Varnish,
# containerd, ...) are unpacked there too, keyed by the version apt offers
# (tc_install_deb), never installed system-wide.

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

# --- Debian packages, unpacked into the cache ---------------------------------
#
# tc_install_deb installs nothing system-wide: it downloads Debian packages
# (`apt-get download`, the version apt offers) and unpacks them
# (`dpkg-deb -x`) into <cache>/<package>-<version>/. The programs run from
# there, but their compiled-in paths (/etc/..., /usr/lib/..., /var/...)
# still point at the machine: callers pass config and data paths explicitly.
#
# Shared libraries: the package's Depends and PreDepends are read with
# `apt-cache depends` and followed through library packages; a dependency
# that dpkg says is not installed and that is a runtime library package
# (lib*, not -dev) is unpacked too, into <dir>/deps/. Every ELF program of
# the package is then checked with `ldd`: one that finds a library only in
# deps/ gets a wrapper, <dir>/wrappers/<program>, that sets LD_LIBRARY_PATH
# to deps/'s library directories and execs it (tc_deb_bin prints the path
# to run), and a library that ldd still cannot find fails the install. The
# system libraries the programs were found to use are listed in
# <dir>/.system-libs: when one of them has gone (its package was removed
# since), the next call installs again, and unpacks it this time.

# Bound on one apt-get or apt-cache call, in seconds.
TC_APT_TIMEOUT="${TC_APT_TIMEOUT:-600}"
# TC_DEB_VERSION[package] is the version apt offers (tc_deb_versions).
declare -A TC_DEB_VERSION=()

# tc_deb_versions PACKAGE... fills TC_DEB_VERSION[PACKAGE] with the version
# apt would install of each PACKAGE not already in it, in one apt-cache call
# (at load it takes seconds). When apt offers no version of one of them (the
# package lists are empty, or older than the package), it runs
# `apt-get update` once, under the "apt" lock, and asks again.
tc_deb_versions() {
  local want=() p out v
  for p in "$@"; do [[ -n "${TC_DEB_VERSION[$p]:-}" ]] || want+=("$p"); done
  ((${#want[@]})) || return 0
  out="$(_tc_apt_policy "${want[@]}")"
  if ! _tc_apt_offers_all "$out" "${want[@]}"; then
    tc_with_lock apt _tc_apt_update_locked "${want[@]}" || return 1
    out="$(_tc_apt_policy "${want[@]}")"
  fi
  for p in "${want[@]}"; do
    v="$(_tc_apt_candidate "$out" "$p")"
    if [[ -z "$v" ]]; then
      tc_log "error: apt offers no version of $p, even after apt-get update (is it in the configured sources?)"
      return 1
    fi
    TC_DEB_VERSION[$p]="$v"
  done
}

# tc_deb_upstream VERSION prints the upstream part of a Debian VERSION
# (no epoch, no Debian revision): 5:7.0.15-1~deb12u10 -> 7.0.15.
tc_deb_upstream() {
  local v="${1#*:}"
  printf '%s\n' "${v%-*}"
}

# tc_install_deb CHECK PACKAGE [EXTRA...] makes sure Debian's PACKAGE, at
# the version apt offers, is unpacked in <cache>/PACKAGE-VERSION/ and prints
# that directory (an epoch's ":" is written "%3a" there, as apt names its
# downloads: a ":" would split LD_LIBRARY_PATH). EXTRA packages (what
# PACKAGE's own files point at: nginx-common's config, redis-tools' binary)
# are unpacked into the same directory, their versions recorded in the
# .done marker; libraries the machine lacks go into its deps/ (see above).
# CHECK is a function called as `CHECK DIR` once everything is unpacked,
# before the install is marked done (run the programs, compare versions),
# or "-" for none. Two runs that race build once: tc_install's lock.
tc_install_deb() {
  local check="$1" pkg="$2"; shift 2
  local extras=("$@") stamp=deb p key dir
  tc_deb_versions "$pkg" "${extras[@]}" || return 1
  for p in "${extras[@]}"; do stamp+=" $p=${TC_DEB_VERSION[$p]}"; done
  key="${TC_DEB_VERSION[$pkg]//:/%3a}"
  dir="$(tc_cache_dir "$pkg" "$key")"
  if tc_is_installed "$dir" "$stamp" && ! _tc_deb_system_libs_present "$dir"; then
    tc_with_lock "$pkg-$key" _tc_deb_forget_locked "$dir" || return 1
  fi
  tc_install "$pkg" "$key" "$stamp" _tc_deb_build "$check" "$pkg" "${extras[@]}"
}

# tc_deb_bin DIR PROGRAM prints the path to run PROGRAM of packages that
# tc_install_deb unpacked in DIR: its wrapper when it has one, else the
# program itself (from usr/sbin, usr/bin, sbin or bin).
tc_deb_bin() {
  local dir="$1" prog="$2" d
  for d in wrappers usr/sbin usr/bin sbin bin; do
    if [[ -f "$dir/$d/$prog" && -x "$dir/$d/$prog" ]]; then
      printf '%s\n' "$dir/$d/$prog"
      return 0
    fi
  done
  tc_log "error: $dir has no program $prog"
  return 1
}

# tc_expect WHAT WANT CMD... runs CMD (for at most 60 s) and fails, saying
# what it got, unless CMD exits 0 and its output (stdout and stderr)
# contains WANT.
tc_expect() {
  local what="$1" want="$2"; shift 2
  local out rc=0
  out="$(timeout -k 5 60 "$@" 2>&1 9>&-)" || rc=$?
  if ((rc != 0)); then
    tc_log "error: $what: '$*' failed (exit $rc): $out"
    return 1
  fi
  if [[ "$out" != *"$want"* ]]; then
    tc_log "error: $what: '$*' does not say '$want'; it says: $out"
    return 1
  fi
}

_tc_apt_policy() {
  timeout -k 5 "$TC_APT_TIMEOUT" apt-cache policy "$@" 2>/dev/null 9>&- || true
}

# _tc_apt_candidate POLICY_OUTPUT PACKAGE prints PACKAGE's candidate version
# from `apt-cache policy` output; nothing when apt has none.
_tc_apt_candidate() {
  awk -v p="$2:" '
    $1 == p { on = 1; next }
    /^[^ ]/ { on = 0 }
    on && $1 == "Candidate:" { if ($2 != "(none)") print $2; exit }' <<<"$1"
}

# _tc_apt_offers_all POLICY_OUTPUT PACKAGE... succeeds when apt has a
# candidate for every PACKAGE.
_tc_apt_offers_all() {
  local out="$1" p; shift
  for p in "$@"; do [[ -n "$(_tc_apt_candidate "$out" "$p")" ]] || return 1; done
}

_tc_apt_update_locked() {
  # Another run may have updated the lists while we waited for the lock.
  _tc_apt_offers_all "$(_tc_apt_policy "$@")" "$@" && return 0
  command -v apt-get >/dev/null 2>&1 || tc_die "apt-get is not available: cannot install $*"
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || tc_die "apt-get update (for $*) needs root or sudo"
    sudo=(sudo -n)
  fi
  tc_log "apt offers no version of some of: $*; running apt-get update"
  timeout -k 10 "$TC_APT_TIMEOUT" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get update -qq </dev/null >&2 9>&-
}

# _tc_apt_download DIR WHAT PACKAGE[=VERSION]... downloads .debs into DIR
# (bounded; output to stderr: our callers' stdout is the paths they print;
# without the install lock's descriptor, which a straggler must not keep).
_tc_apt_download() {
  local dir="$1" what="$2"; shift 2
  local opts=(-q) rc=0
  # As root apt downloads unsandboxed anyway; saying so quiets its warning
  # about a directory its _apt user cannot enter.
  if [[ "$(id -u)" == 0 ]]; then opts+=(-o APT::Sandbox::User=root); fi
  mkdir -p "$dir" || return 1
  (cd "$dir" && exec timeout -k 10 "$TC_APT_TIMEOUT" apt-get download "${opts[@]}" "$@") \
    </dev/null >&2 9>&- || rc=$?
  if ((rc == 124 || rc == 137)); then
    tc_log "error: $what: apt-get download $* timed out after ${TC_APT_TIMEOUT}s"
  elif ((rc != 0)); then
    tc_log "error: $what: apt-get download $* failed (exit $rc)"
  fi
  return "$rc"
}

# _tc_deb_build TMP CHECK PACKAGE [EXTRA...] fills TMP for tc_install_deb.
# (It runs inside `if !`, where set -e is off: every step is checked.)
_tc_deb_build() {
  local tmp="$1" check="$2"; shift 2
  local what="$1 ${TC_DEB_VERSION[$1]}" p specs=() libs deb
  for p in "$@"; do specs+=("$p=${TC_DEB_VERSION[$p]}"); done
  _tc_apt_download "$tmp/.debs/main" "$what" "${specs[@]}" || return 1
  libs="$(_tc_deb_missing_libs "$@")" || return 1
  if [[ -n "$libs" ]]; then
    tc_log "[$what] libraries this machine lacks, unpacked into deps/: $(tr '\n' ' ' <<<"$libs")"
    # shellcheck disable=SC2086 # package names, one a line
    _tc_apt_download "$tmp/.debs/deps" "$what" $libs || return 1
  fi
  for deb in "$tmp"/.debs/main/*.deb; do
    dpkg-deb -x "$deb" "$tmp" || { tc_log "error: $what: dpkg-deb -x $deb failed"; return 1; }
  done
  if [[ -n "$libs" ]]; then
    for deb in "$tmp"/.debs/deps/*.deb; do
      dpkg-deb -x "$deb" "$tmp/deps" || { tc_log "error: $what: dpkg-deb -x $deb failed"; return 1; }
    done
  fi
  rm -rf "$tmp/.debs"
  _tc_deb_wrap "$tmp" "$what" || return 1
  if [[ "$check" != - ]]; then "$check" "$tmp" || return 1; fi
}

# _tc_deb_depends PACKAGE... prints the Depends and PreDepends of the
# PACKAGEs (one apt-cache call), a line each, alternatives separated by
# spaces (virtual packages in <>).
_tc_deb_depends() {
  timeout -k 5 "$TC_APT_TIMEOUT" apt-cache depends --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null 9>&- |
    awk '
      /^ [ |](Pre)?Depends: / {
        name = $2; sub(/:any$/, "", name)
        group = group (group == "" ? "" : " ") name
        if (substr($0, 2, 1) != "|") { print group; group = "" }
      }' | sort -u
}

_tc_deb_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

# _tc_deb_is_runtime_lib PACKAGE succeeds for a runtime library package's
# name. Programs (adduser, gcc), data (nginx-common), headers and virtual
# packages are the machine's business or the caller's EXTRAs.
_tc_deb_is_runtime_lib() {
  [[ "$1" == lib* && "$1" != *-dev && "$1" != *-dev-bin && "$1" != *-doc ]]
}

# _tc_deb_missing_libs PACKAGE... prints, a line each, the runtime library
# packages that PACKAGEs need, directly or through other such packages, and
# that are not installed: of a dependency with alternatives none of which
# is installed, the first library apt offers. Breadth first, two apt calls
# a level (each takes a second or more on a busy machine).
_tc_deb_missing_libs() {
  local level=("$@") seen=" $* " groups=() group alt cands policy pick
  while ((${#level[@]})); do
    groups=()
    cands=()
    while read -r group; do
      for alt in $group; do
        if _tc_deb_installed "$alt"; then continue 2; fi
      done
      groups+=("$group")
      for alt in $group; do
        if _tc_deb_is_runtime_lib "$alt"; then cands+=("$alt"); fi
      done
    done < <(_tc_deb_depends "${level[@]}")
    level=()
    ((${#cands[@]})) || break
    policy="$(_tc_apt_policy "${cands[@]}")"
    for group in "${groups[@]}"; do
      pick=""
      for alt in $group; do
        if _tc_deb_is_runtime_lib "$alt" && [[ -n "$(_tc_apt_candidate "$policy" "$alt")" ]]; then
          pick="$alt"
          break
        fi
      done
      [[ -n "$pick" && "$seen" != *" $pick "* ]] || continue
      seen+="$pick "
      level+=("$pick")
      printf '%s\n' "$pick"
    done
  done
}

# _tc_deb_wrap DIR WHAT writes DIR/wrappers/ for the programs that need
# libraries from DIR/deps, and DIR/.system-libs; it fails when ldd cannot
# find a library of a program even with DIR/deps.
_tc_deb_wrap() {
  local dir="$1" what="$2" prog name out libpath="" d
  if [[ -d "$dir/deps" ]]; then
    while read -r d; do
      libpath+="${libpath:+:}\$d/${d#"$dir"/}"
    done < <(find "$dir/deps" \( -type f -o -type l \) -name 'lib*.so*' -printf '%h\n' | sort -u)
  fi
  : >"$dir/.system-libs"
  for prog in "$dir"/usr/sbin/* "$dir"/usr/bin/* "$dir"/sbin/* "$dir"/bin/*; do
    [[ -f "$prog" && -x "$prog" && "$(head -c 4 "$prog")" == $'\x7fELF' ]] || continue
    name="${prog##*/}"
    # Of a static program ldd says "not a dynamic executable" (exit 1).
    out="$(env -u LD_LIBRARY_PATH ldd "$prog" 2>/dev/null)" || true
    if [[ "$out" == *"not found"* ]]; then
      if [[ -n "$libpath" ]]; then
        out="$(LD_LIBRARY_PATH="${libpath//\$d/$dir}" ldd "$prog" 2>/dev/null)" || true
      fi
      if [[ "$out" == *"not found"* ]]; then
        tc_log "error: $what: $name needs libraries that neither the machine nor the packages' missing dependencies have:"$'\n'"$(grep 'not found' <<<"$out")"
        return 1
      fi
      mkdir -p "$dir/wrappers" || return 1
      _tc_deb_wrapper "${prog#"$dir"/}" "$libpath" >"$dir/wrappers/$name" || return 1
      chmod 755 "$dir/wrappers/$name" || return 1
    fi
    awk -v d="$dir/" '$2 == "=>" && $3 ~ /^\// && index($3, d) != 1 { print $3 }' <<<"$out" >>"$dir/.system-libs"
  done
  sort -u -o "$dir/.system-libs" "$dir/.system-libs"
}

# _tc_deb_wrapper PROGRAM LIBPATH prints the wrapper of PROGRAM (a path
# relative to the install directory). LIBPATH's directories start with $d,
# the install directory, which the wrapper finds from its own path: the
# cache can move.
_tc_deb_wrapper() {
  cat <<EOF
#!/bin/sh
# Written by hack/lib.sh (tc_install_deb): runs $1 with the shared
# libraries this machine lacked, unpacked in deps/.
d="\$(cd "\${0%/*}/.." && pwd)" || exit 127
LD_LIBRARY_PATH="$2\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "\$d/$1" "\$@"
EOF
}

# _tc_deb_system_libs_present DIR succeeds when every system library that
# DIR's programs were found to use is still there (an install without
# .system-libs has nothing to check).
_tc_deb_system_libs_present() {
  local lib
  [[ -f "$1/.system-libs" ]] || return 0
  while read -r lib; do
    [[ -z "$lib" || -e "$lib" ]] || { tc_log "$1: $lib has gone from this machine; installing again"; return 1; }
  done <"$1/.system-libs"
}

_tc_deb_forget_locked() {
  _tc_deb_system_libs_present "$1" 2>/dev/null || rm -f "$1/.done"
}

# tc_apt_install CMD PACKAGE... makes sure CMD is on PATH, installing the
# Debian PACKAGEs system-wide, non-interactively, when it is not, and prints
# CMD's path. Services that the packages ship are not started. Only for what
# must be on the machine's PATH (iptables, which kubelet and the CNI
# plugins run); everything else goes into the cache with tc_install_deb.
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
