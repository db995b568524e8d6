#!/usr/bin/env bash
# hack/ensure-redis.sh — make sure redis-server is installed and print its
# path. Installs Debian's redis-server package when it is not on PATH
# (non-interactive, idempotent, sudo only when not root). Starts nothing:
# tests start their own throwaway instances.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tc_apt_install redis-server redis-server
