#!/usr/bin/env bash
# hack/deadcode.sh — fail when a function of the module cannot be reached
# from any of its commands (cmd/..., tools/...), as golang.org/x/tools'
# deadcode sees it (RTA call graph from each main; generated files are not
# checked). Code that only tests use belongs in a _test.go file or a
# test-only package; what must stay reachable only from tests on purpose
# is listed, with the reason, in hack/deadcode-allow.txt. An entry there
# that no longer matches anything fails the check too, so the list never
# outlives its reasons.
#
# deadcode cannot see an exported method as dead when a value of its type
# reaches reflection or an interface (fmt, slog, prometheus): such methods
# still need a human eye (grep for callers outside _test.go files).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

dc="$(bash hack/tools.sh deadcode)"
allow=hack/deadcode-allow.txt
module="$(go list -m)"

# "<package dir> <func>" per unreachable function, e.g.
# "internal/sidecar RunWith" or "internal/store breaker.current".
# Packages under test/ are left out: they are harnesses whose API is for
# _test.go files, which deadcode does not see; a command reaching one
# (tools/democluster runs test/testnode) does not make the rest of it dead.
found="$("$dc" -f '{{range .Funcs}}{{$.Path}} {{.Name}}{{"\n"}}{{end}}' ./cmd/... ./tools/... |
  sed -E "s#^${module}/##" | sed -e '/^$/d' -e '/^test\//d' | sort -u)"
allowed="$(sed -E 's/#.*//; s/[[:space:]]+/ /g; s/^ //; s/ $//' "$allow" | sed '/^$/d' | sort -u)"

dead="$(comm -23 <(printf '%s\n' "$found") <(printf '%s\n' "$allowed") | sed '/^$/d')"
stale="$(comm -13 <(printf '%s\n' "$found") <(printf '%s\n' "$allowed") | sed '/^$/d')"
rc=0
if [[ -n "$dead" ]]; then
  echo "deadcode: no command reaches these functions; delete them, or move what only tests use into a _test.go file (or list it in $allow with the reason):"
  sed 's/^/  /' <<<"$dead"
  rc=1
fi
if [[ -n "$stale" ]]; then
  echo "deadcode: these entries of $allow match nothing any more; remove them:"
  sed 's/^/  /' <<<"$stale"
  rc=1
fi
((rc == 0)) && echo "deadcode: every function is reachable from a command or allowed ($(wc -l <<<"$allowed") allowed)"
exit "$rc"
