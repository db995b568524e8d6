#!/usr/bin/env bash
# hack/ensure-redis.sh — make sure redis-server is in the tool cache (see
# hack/lib.sh) and print its path. Starts nothing: tests start their own
# throwaway instances.
#
#   hack/ensure-redis.sh [server]   the path of redis-server
#   hack/ensure-redis.sh cli        the path of redis-cli
#   hack/ensure-redis.sh env        TIERCACHE_REDIS_SERVER=<path>, the line
#                                   test/testredis reads (the make targets
#                                   that run tests export it)
#
# Source: Debian's redis-server package (only a symlink, redis-server ->
# redis-check-rdb) and redis-tools (the one binary), `apt-get download` +
# `dpkg -x` into <cache>/redis-server-<version>/ (the epoch's ":" written
# "%3a"), keyed by the version apt offers; nothing is installed
# system-wide. Libraries the machine lacks (libjemalloc2, liblzf1 on a fresh
# one) are unpacked next to it, and the printed path is then a wrapper that
# finds them (tc_install_deb). The install is checked by running
# `redis-server --version` and `redis-cli --version`.
# Paths go to stdout, logs to stderr.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

_redis_check() {
  local dir="$1" want
  want="v=$(tc_deb_upstream "${TC_DEB_VERSION[redis-server]}")"
  tc_expect "redis-server" "$want" "$(tc_deb_bin "$dir" redis-server)" --version || return 1
  tc_expect "redis-cli" "redis-cli $(tc_deb_upstream "${TC_DEB_VERSION[redis-tools]}")" \
    "$(tc_deb_bin "$dir" redis-cli)" --version
}

main() {
  tc_need_cmd apt-get apt-cache dpkg-deb dpkg-query ldd awk timeout
  local what="${1:-server}" dir
  (($# <= 1)) || tc_die "usage: hack/ensure-redis.sh [server|cli|env]"
  dir="$(tc_install_deb _redis_check redis-server redis-tools)"
  case "$what" in
    server) tc_deb_bin "$dir" redis-server ;;
    cli) tc_deb_bin "$dir" redis-cli ;;
    env) printf 'TIERCACHE_REDIS_SERVER=%q\n' "$(tc_deb_bin "$dir" redis-server)" ;;
    *) tc_die "unknown argument '$what' (known: server cli env)" ;;
  esac
}

main "$@"
