#!/usr/bin/env bash
# hack/fuzz.sh — run every `func Fuzz*` target in the module, one at a time,
# for FUZZTIME each (default 8s). Targets are found by grepping *_test.go, so
# a new fuzz test is picked up without editing anything. A failure leaves its
# reproducer under the package's testdata/fuzz/ and fails the run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

FUZZTIME="${FUZZTIME:-8s}"
# The retry's budget: a number of executions, which the coordinator's
# deadline race (below) cannot hit. 100,000 run in 2 to 10 s here.
FUZZRETRY="${FUZZRETRY:-100000x}"
GO="${GO:-go}"

# Some fuzzed packages' tests start redis-server (internal/store/l2's
# TestMain checks for it); test/testredis only finds it, so install it into
# the tool cache here and say where.
TIERCACHE_REDIS_SERVER="$(bash hack/ensure-redis.sh)"
export TIERCACHE_REDIS_SERVER

# "<package dir> <target>" lines, sorted, from test files outside testdata,
# vendor and hidden directories.
targets="$(
  find . \( -path './.?*' -o -path ./bin -o -name testdata -o -name vendor \) -prune -o \
    -name '*_test.go' -print0 |
    xargs -0 -r grep -H -o -E '^func Fuzz[A-Za-z0-9_]*\(' |
    sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#' |
    sort -u
)"

if [[ -z "$targets" ]]; then
  echo "fuzz: no Fuzz* targets found"
  exit 0
fi

count=$(wc -l <<<"$targets")
echo "fuzz: $count target(s), $FUZZTIME each"
failed=()
# reproducers DIR NAME counts the inputs the fuzzer saved as failing.
reproducers() { { find "$1/testdata/fuzz/$2" -type f 2>/dev/null || true; } | wc -l; }

while read -r dir name; do
  budget=$FUZZTIME
  for attempt in 1 2; do
    echo "--- go test -run='^\$' -fuzz='^${name}\$' -fuzztime=$budget $dir/"
    before=$(reproducers "$dir" "$name")
    if "$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$budget" "$dir/" </dev/null; then
      break
    fi
    # A failure that saved a reproducer is a finding. One that saved
    # nothing is the fuzzing engine itself failing: with a duration
    # budget, Go's coordinator can lose a race with its own deadline at
    # the end of the run ("context deadline exceeded", no input; seen
    # twice in a row on this loaded machine). Try once more with a count
    # of executions, which has no deadline to race, before calling it a
    # failure.
    budget=$FUZZRETRY
    if (($(reproducers "$dir" "$name") > before)) || ((attempt == 2)); then
      failed+=("$dir $name")
      break
    fi
    echo "fuzz: $name failed without a failing input; retrying once for $FUZZRETRY executions"
  done
done <<<"$targets"

if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "fuzz: all $count target(s) passed"
