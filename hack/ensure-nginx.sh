#!/usr/bin/env bash
# hack/ensure-nginx.sh — make sure nginx and wrk are installed and print
# their paths, one a line: nginx first, then wrk. Installs Debian's nginx
# and wrk packages when they are not on PATH (non-interactive, idempotent,
# sudo only when not root; tc_apt_install runs apt-get update first, so a
# fresh machine with empty package lists works). nginx's packaged service
# is not started: hack/bench.sh runs its own nginx from a temporary prefix.
#
# nginx lives in /usr/sbin, which is not on every user's PATH: that is
# added here before looking.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin" ;; esac
# nginx-light would do too, but Debian 12's plain nginx (1.22) is the one
# the benchmark numbers name.
tc_apt_install nginx nginx
tc_apt_install wrk wrk
