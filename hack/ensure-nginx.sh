#!/usr/bin/env bash
# hack/ensure-nginx.sh — make sure nginx and wrk are in the tool cache (see
# hack/lib.sh) and print their paths, one a line:
#
#   1. nginx
#   2. wrk
#   3. nginx's configuration directory in the cache (mime.types,
#      fastcgi_params, ...): a config that includes one of those names it
#      by this path, never /etc/nginx
#
# Sources: Debian's nginx (with nginx-common, its config files, unpacked
# into the same directory) and wrk, each `apt-get download` + `dpkg -x` into
# <cache>/<package>-<version>/, keyed by the version apt offers; nothing is
# installed system-wide and no service is started (hack/bench.sh runs its
# own nginx from a temporary prefix). Libraries the machine lacks (wrk's
# LuaJIT) are unpacked next to them and the printed path is then a wrapper
# that finds them (tc_install_deb).
#
# The cached nginx keeps the paths Debian compiled in (`nginx -V`):
# --conf-path /etc/nginx/nginx.conf, --modules-path /usr/lib/nginx/modules,
# temp paths under /var/lib/nginx, none of which exists on a machine without
# the package. Run it as hack/bench.sh does: `-p PREFIX/ -c CONF -e ERRLOG`,
# with every *_temp_path set in CONF and no load_module. The install is
# checked that way: `nginx -V`, then `nginx -t` of such a config that
# includes the cache's mime.types; wrk by `wrk -v` (which exits 1).
# Paths go to stdout, logs to stderr.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

_nginx_check() {
  local dir="$1" nginx chk rc=0
  nginx="$(tc_deb_bin "$dir" nginx)" || return 1
  tc_expect nginx "nginx/$(tc_deb_upstream "${TC_DEB_VERSION[nginx]}")" "$nginx" -V || return 1
  chk="$(mktemp -d)" || return 1
  cat >"$chk/nginx.conf" <<EOF
pid $chk/nginx.pid;
error_log $chk/error.log;
events {}
http {
  include $dir/etc/nginx/mime.types;
  access_log off;
  client_body_temp_path $chk/client_body;
  proxy_temp_path $chk/proxy_temp;
  fastcgi_temp_path $chk/fastcgi_temp;
  uwsgi_temp_path $chk/uwsgi_temp;
  scgi_temp_path $chk/scgi_temp;
  server { listen 127.0.0.1:1; }
}
EOF
  tc_expect "nginx -t" "test is successful" "$nginx" -t -p "$chk/" -c "$chk/nginx.conf" -e "$chk/error.log" || rc=1
  rm -rf "$chk"
  return "$rc"
}

_wrk_check() {
  local dir="$1" wrk out
  wrk="$(tc_deb_bin "$dir" wrk)" || return 1
  # wrk -v prints its version ("wrk debian/4.1.0-3+b2 [epoll] ...") and
  # usage, and exits 1.
  out="$(timeout 60 "$wrk" -v 2>&1)" || true
  [[ "$out" == "wrk "*"${TC_DEB_VERSION[wrk]}"* ]] || {
    tc_log "error: wrk: '$wrk -v' does not report its version; it says: $out"
    return 1
  }
}

main() {
  tc_need_cmd apt-get apt-cache dpkg-deb dpkg-query ldd awk timeout
  (($# == 0)) || tc_die "usage: hack/ensure-nginx.sh (no arguments)"
  local nginx_dir wrk_dir
  tc_deb_versions nginx nginx-common wrk
  nginx_dir="$(tc_install_deb _nginx_check nginx nginx-common)"
  wrk_dir="$(tc_install_deb _wrk_check wrk)"
  tc_deb_bin "$nginx_dir" nginx
  tc_deb_bin "$wrk_dir" wrk
  printf '%s\n' "$nginx_dir/etc/nginx"
}

main "$@"
