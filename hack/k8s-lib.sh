# shellcheck shell=bash
# hack/k8s-lib.sh — what hack/k8s-tools.sh and hack/node-tools.sh share: the
# pinned etcd and Kubernetes versions, bounded build steps, and the
# throwaway-module build of Kubernetes commands from the Go module proxy.
# Source it after hack/lib.sh, don't run it.

ETCD_VERSION=v3.6.16
# Every Kubernetes binary (kube-apiserver, kubectl, kubelet, ...) is built
# at this one version.
KUBE_VERSION=v1.35.4

# Bounds, in seconds, for each step (module resolution, one compile, one check).
TC_K8S_FETCH_TIMEOUT="${TC_K8S_FETCH_TIMEOUT:-1200}"
TC_K8S_BUILD_TIMEOUT="${TC_K8S_BUILD_TIMEOUT:-2400}"
TC_K8S_CHECK_TIMEOUT="${TC_K8S_CHECK_TIMEOUT:-60}"

# Everything below runs with the Go toolchain that is installed, never one
# that a go.mod's toolchain line would download.
export GOTOOLCHAIN=local
export GOWORK=off
export CGO_ENABLED=0

# _k8s_step WHAT DIR LIMIT CMD... runs CMD in DIR for at most LIMIT seconds.
# On failure it says which tool and step failed and returns non-zero: build
# functions run inside `if !` (where set -e is off), so they check every step.
_k8s_step() {
  local what="$1" dir="$2" limit="$3"; shift 3
  local rc=0 start=$SECONDS
  tc_log "[$what] $1 $2 ${3:-} ..."
  # --foreground: Ctrl-C reaches the compiler too. 9>&-: a straggling child
  # must not keep holding the install lock (fd 9, see tc_with_lock).
  # stdout too goes to stderr: the callers' stdout is the path they print.
  (cd "$dir" && exec timeout --foreground -k 30 "$limit" "$@") 9>&- >&2 || rc=$?
  if ((rc == 124 || rc == 137)); then
    tc_log "error: $what: '$1 $2 ${3:-}' timed out after ${limit}s"
    return 1
  elif ((rc != 0)); then
    tc_log "error: $what: '$1 $2 ${3:-}' failed (exit $rc)"
    return 1
  fi
  tc_log "[$what] ok ($((SECONDS - start))s)"
}

# _k8s_expect WHAT WANT CMD... runs CMD (bounded) and fails unless its output
# contains WANT: a binary that reports the wrong version is not installed.
_k8s_expect() {
  local what="$1" want="$2"; shift 2
  local out rc=0
  out="$(timeout -k 5 "$TC_K8S_CHECK_TIMEOUT" "$@" 2>&1 9>&-)" || rc=$?
  if ((rc != 0)); then
    tc_log "error: $what: '$*' failed (exit $rc): $out"
    return 1
  fi
  if [[ "$out" != *"$want"* ]]; then
    tc_log "error: $what: '$*' does not report $want; it says: $out"
    return 1
  fi
}

# _k8s_gomod DIR MODULE UPSTREAM_GOMOD writes DIR/go.mod for a throwaway main
# module, taking the go and godebug lines from the upstream module's go.mod so
# that the binary gets the runtime defaults its own release build has.
_k8s_gomod() {
  local dir="$1" module="$2" upstream="$3"
  mkdir -p "$dir" || return 1
  {
    printf 'module %s\n\n' "$module"
    grep -E '^(go|godebug) ' "$upstream" || true
  } >"$dir/go.mod"
}

# _k8s_download WHAT MODULE@VERSION FIELD downloads the module into the
# module cache when needed and prints FIELD of `go mod download -json`
# (GoMod: the path of its go.mod; Dir: its source directory).
_k8s_download() {
  local what="$1" spec="$2" field="$3" json path
  json="$(cd / && timeout -k 10 "$TC_K8S_FETCH_TIMEOUT" go mod download -json "$spec" 2>&1 9>&-)" || {
    tc_log "error: $what: 'go mod download $spec' failed: $json"
    return 1
  }
  path="$(sed -n "s/^[[:space:]]*\"$field\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$json")"
  [[ -n "$path" && -e "$path" ]] || { tc_log "error: $what: no $field for $spec in: $json"; return 1; }
  printf '%s\n' "$path"
}

# _k8s_build_kube_cmds WHAT TMP NAME PKG... builds the Kubernetes commands
# PKG... (k8s.io/kubernetes/cmd/...) at KUBE_VERSION into TMP/bin, in a
# throwaway module TMP/build named after NAME.
_k8s_build_kube_cmds() {
  local what="$1" tmp="$2" name="$3"; shift 3
  local mod="$tmp/build" upstream staging pkgs=("$@")
  # Kubernetes' go.mod requires its staging modules (k8s.io/api, client-go,
  # ...) at v0.0.0 and replaces them with ./staging/...; those replacements
  # do not apply outside it, so ours point each one at its published twin,
  # v1.X.Y -> v0.X.Y. Only the ones it requires: replacing others asks the
  # proxy for versions it refuses.
  local staging_version="v0.${KUBE_VERSION#v1.}"
  local major="${KUBE_VERSION#v}"; major="${major%%.*}"
  local minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
  upstream="$(_k8s_download "$what" "k8s.io/kubernetes@$KUBE_VERSION" GoMod)" || return 1
  staging="$(go mod edit -print "$upstream" | awk '
    /^require \($/ { inreq = 1; next }
    inreq && /^\)$/ { inreq = 0; next }
    inreq && $2 == "v0.0.0" && $1 ~ /^k8s\.io\// { print $1 }
    /^require [^(]/ && $3 == "v0.0.0" && $2 ~ /^k8s\.io\// { print $2 }')" || {
    tc_log "error: $what: cannot read $upstream"
    return 1
  }
  [[ -n "$staging" ]] || { tc_log "error: $what: no v0.0.0 staging requirements in $upstream"; return 1; }
  _k8s_gomod "$mod" "tiercache.local/k8s-tools/$name" "$upstream" || return 1
  {
    printf '\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
    local m
    for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
    printf ')\n'
  } >>"$mod/go.mod"

  # Without these the binaries call themselves v0.0.0 and helm's kubeVersion
  # checks against the server break.
  local ldflags="-s -w"
  local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  done
  GOFLAGS="-mod=mod -buildvcs=false" _k8s_step "$what" "$mod" "$TC_K8S_FETCH_TIMEOUT" \
    go list -f '{{.ImportPath}}' "${pkgs[@]}" || return 1
  mkdir -p "$tmp/bin" || return 1
  GOFLAGS="-mod=mod -buildvcs=false" _k8s_step "$what" "$mod" "$TC_K8S_BUILD_TIMEOUT" \
    go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/" "${pkgs[@]}" || return 1
}
