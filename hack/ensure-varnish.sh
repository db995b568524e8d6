#!/usr/bin/env bash
# hack/ensure-varnish.sh — make sure Varnish is in the tool cache (see
# hack/lib.sh) and print its paths, one a line:
#
#   1. varnishd
#   2. varnishadm
#   3. varnishstat
#   4. the vmod directory: pass `-p vmod_path=<it>` when the VCL imports a
#      vmod (std, directors, ...)
#
# Source: Debian's varnish package, `apt-get download` + `dpkg -x` into
# <cache>/varnish-<version>/, keyed by the version apt offers; nothing is
# installed system-wide and no service is started. libvarnishapi3 (which
# varnishadm and varnishstat link) and any other library the machine lacks
# are unpacked next to it, and the printed paths are then wrappers that
# find them (tc_install_deb).
#
# Running the cached varnishd: its compiled-in paths point at the machine
# (vmod_path /usr/lib/<triplet>/varnish/vmods, vcl_path /etc/varnish and
# /usr/share/varnish/vcl, the working directory under /var/lib/varnish), and
# the package's users (varnish, vcache) do not exist without its postinst.
# So pass `-n WORKDIR` (absolute), `-j none` when root, `-p vmod_path=`
# (line 4) and, to include the cache's devicedetect.vcl,
# `-p vcl_path=<dir>/usr/share/varnish/vcl`. varnishd compiles each VCL
# into a shared object with the C compiler its cc_command names (Debian's:
# `exec <triplet>-gcc ... -fpic -shared ...`), at run time: that compiler
# comes from the machine (Debian's gcc; cgo and `go test -race` need it
# too), not from the cache; this script fails when it is not on PATH.
# No vcc_allow_inline_c needed: that is only for C{ }C blocks in VCL.
#
# The install is checked by `varnishd -V`, then by starting varnishd on a
# free loopback port with a VCL that imports std and answers a synthetic
# 200, and asking it with curl, varnishadm (ping, param.show cc_command,
# recorded in <dir>/cc_command) and varnishstat.
# Paths go to stdout, logs to stderr.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# _varnish_vmods DIR prints DIR's vmod directory.
_varnish_vmods() {
  local d
  d="$(find "$1/usr/lib" -type d -path '*/varnish/vmods' -print -quit)"
  [[ -n "$d" ]] || { tc_log "error: no varnish/vmods directory under $1/usr/lib"; return 1; }
  printf '%s\n' "$d"
}

_varnish_check() {
  local dir="$1" what="varnish ${TC_DEB_VERSION[varnish]}" varnishd varnishadm varnishstat
  local vmods chk port pid="" rc=0
  varnishd="$(tc_deb_bin "$dir" varnishd)" || return 1
  varnishadm="$(tc_deb_bin "$dir" varnishadm)" || return 1
  varnishstat="$(tc_deb_bin "$dir" varnishstat)" || return 1
  vmods="$(_varnish_vmods "$dir")" || return 1
  local version="varnish-$(tc_deb_upstream "${TC_DEB_VERSION[varnish]}")"
  tc_expect "$what" "$version" "$varnishd" -V || return 1
  tc_expect "$what" "$version" "$varnishstat" -V || return 1

  chk="$(mktemp -d)" || return 1
  cat >"$chk/check.vcl" <<'EOF'
vcl 4.1;
import std;
backend default none;
sub vcl_recv {
  return (synth(200, std.toupper("ok")));
}
EOF
  port="$(tc_free_port)"
  local args=(-F -n "$chk/work" -a "127.0.0.1:$port" -f "$chk/check.vcl"
    -p "vmod_path=$vmods" -s malloc,16m)
  if [[ "$(id -u)" == 0 ]]; then args+=(-j none); fi
  "$varnishd" "${args[@]}" >"$chk/varnishd.log" 2>&1 9>&- &
  pid=$!
  if ! tc_wait_http "http://127.0.0.1:$port/" 60 "$pid"; then
    tc_log "error: $what: varnishd did not answer; its log:"$'\n'"$(cat "$chk/varnishd.log")"
    rc=1
  elif ! tc_expect "$what" PONG "$varnishadm" -n "$chk/work" ping ||
    ! tc_expect "$what" MAIN.uptime "$varnishstat" -n "$chk/work" -1 -f MAIN.uptime ||
    ! timeout 60 "$varnishadm" -n "$chk/work" param.show cc_command >"$chk/cc" 2>&1; then
    rc=1
  else
    # "cc_command\n  Value is: exec x86_64-linux-gnu-gcc ... %o %s (default)",
    # the value possibly quoted.
    sed -n 's/^[[:space:]]*Value is:[[:space:]]*//p' "$chk/cc" |
      sed 's/[[:space:]]*(default)$//' | tr -d '"' >"$dir/cc_command"
    [[ -s "$dir/cc_command" ]] || { tc_log "error: $what: cannot read cc_command from: $(cat "$chk/cc")"; rc=1; }
  fi
  tc_stop "$pid"
  rm -rf "$chk"
  return "$rc"
}

# _varnish_need_cc DIR fails unless the compiler varnishd runs is on PATH.
_varnish_need_cc() {
  local cc
  cc="$(awk '{ print ($1 == "exec" ? $2 : $1); exit }' "$1/cc_command")"
  command -v "$cc" >/dev/null 2>&1 ||
    tc_die "varnishd compiles VCL with '$cc' (its cc_command: $(cat "$1/cc_command")), which is not on PATH: install Debian's gcc (build-essential; cgo and go test -race need it too)"
}

main() {
  tc_need_cmd apt-get apt-cache dpkg-deb dpkg-query ldd awk timeout curl
  (($# == 0)) || tc_die "usage: hack/ensure-varnish.sh (no arguments)"
  # Checked before the install too: without it the check cannot compile VCL.
  command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 ||
    tc_die "varnishd needs a C compiler at run time to compile VCL, and there is none on PATH: install Debian's gcc (build-essential)"
  local dir
  dir="$(tc_install_deb _varnish_check varnish)"
  _varnish_need_cc "$dir"
  tc_deb_bin "$dir" varnishd
  tc_deb_bin "$dir" varnishadm
  tc_deb_bin "$dir" varnishstat
  _varnish_vmods "$dir"
}

main "$@"
