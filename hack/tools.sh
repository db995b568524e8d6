#!/usr/bin/env bash
# hack/tools.sh — install the project's developer tools into the cache
# (see hack/lib.sh) and print the path of each binary, one per line.
#
#   hack/tools.sh               install every tool
#   hack/tools.sh staticcheck   install one and print its path (staticcheck, deadcode)
#
# Versions are pinned here; bump them here only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# staticcheck 2026.2.2; builds and runs with Go 1.26.
STATICCHECK_VERSION=v0.8.2
# golang.org/x/tools, for cmd/deadcode (make lint's dead-code check).
XTOOLS_VERSION=v0.52.0

tc_tool() {
  case "$1" in
    staticcheck) tc_install_go_tool staticcheck "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ;;
    deadcode) tc_install_go_tool deadcode "golang.org/x/tools/cmd/deadcode@${XTOOLS_VERSION}" ;;
    *) tc_die "unknown tool '$1' (known: staticcheck, deadcode)" ;;
  esac
}

main() {
  local tools=("$@")
  ((${#tools[@]})) || tools=(staticcheck deadcode)
  local t
  for t in "${tools[@]}"; do
    tc_tool "$t"
  done
}

main "$@"
