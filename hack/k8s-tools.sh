#!/usr/bin/env bash
# hack/k8s-tools.sh — build the Kubernetes test tools from the Go module proxy
# into the tool cache (see hack/lib.sh) and print where they are.
#
#   hack/k8s-tools.sh [all]            build whatever is missing, print every path
#   hack/k8s-tools.sh etcd             etcd                          -> its path
#   hack/k8s-tools.sh kube             kube-apiserver and kubectl    -> their paths
#   hack/k8s-tools.sh helm             helm                          -> its path
#   hack/k8s-tools.sh controller-gen   controller-gen                -> its path
#   hack/k8s-tools.sh envtest-assets   etcd + kube-apiserver + kubectl in one
#                                      directory, for KUBEBUILDER_ASSETS -> it
#   hack/k8s-tools.sh env              builds all, prints KEY=VALUE lines:
#                                      KUBEBUILDER_ASSETS, HELM, CONTROLLER_GEN, KUBECTL
#
# Use the env lines with `set -a; eval "$(hack/k8s-tools.sh env)"; set +a` or
# `env $(hack/k8s-tools.sh env) go test ./...`. Paths go to stdout, build logs
# to stderr.
#
# Nothing is downloaded but Go modules: every tool is compiled from source that
# the Go module proxy serves, in a throwaway module (or `go install pkg@version`)
# outside the repository, so the repository's go.mod is never touched. The
# normal module and build caches are shared. Each tool version gets its own
# cache directory, built and marked done as hack/lib.sh describes, and is
# rebuilt when the Go toolchain changes. Builds are CPU-heavy (kube-apiserver
# is minutes on 2 cores) and run one at a time.
#
# Versions are pinned here; bump them here only.
set -euo pipefail
# A run that waits for another's build must outwait a cold kube build.
: "${TC_LOCK_TIMEOUT:=3600}"
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ETCD_VERSION=v3.6.16
# kube-apiserver and kubectl; also the Kubernetes version that helm assumes
# offline and the name of the envtest assets directory.
KUBE_VERSION=v1.35.4
HELM_VERSION=v3.22.0
# Newest controller-tools release; builds with go1.26, k8s.io libraries v0.37
# (generates CRDs that a 1.35 API server accepts).
CONTROLLER_GEN_VERSION=v0.23.0

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

# --- etcd ---------------------------------------------------------------------

_k8s_build_etcd() {
  local tmp="$1" what="etcd $ETCD_VERSION" mod="$1/build" upstream
  local module=go.etcd.io/etcd/server/v3
  upstream="$(_k8s_download "$what" "$module@$ETCD_VERSION" GoMod)" || return 1
  _k8s_gomod "$mod" tiercache.local/k8s-tools/etcd "$upstream" || return 1
  GOFLAGS="-mod=mod -buildvcs=false" _k8s_step "$what" "$mod" "$TC_K8S_FETCH_TIMEOUT" \
    go get "$module@$ETCD_VERSION" || return 1
  GOFLAGS="-mod=mod -buildvcs=false" _k8s_step "$what" "$mod" "$TC_K8S_BUILD_TIMEOUT" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" "$module" || return 1
  _k8s_expect "$what" "etcd Version: ${ETCD_VERSION#v}" "$tmp/bin/etcd" --version
}

ensure_etcd() {
  local dir
  dir="$(tc_install etcd "$ETCD_VERSION" "$(go env GOVERSION)" _k8s_build_etcd)" || return 1
  printf '%s\n' "$dir/bin/etcd"
}

# --- kube-apiserver, kubectl --------------------------------------------------

_k8s_build_kube() {
  local tmp="$1" what="kube-apiserver/kubectl $KUBE_VERSION" mod="$1/build" upstream staging
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
  _k8s_gomod "$mod" tiercache.local/k8s-tools/kube "$upstream" || return 1
  {
    printf '\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
    local m
    for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
    printf ')\n'
  } >>"$mod/go.mod"

  local pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
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
  _k8s_expect "$what" "Kubernetes $KUBE_VERSION" "$tmp/bin/kube-apiserver" --version || return 1
  _k8s_expect "$what" "Client Version: $KUBE_VERSION" \
    env KUBECONFIG=/dev/null "$tmp/bin/kubectl" version --client
}

ensure_kube() {
  local dir
  dir="$(tc_install kube "$KUBE_VERSION" "$(go env GOVERSION)" _k8s_build_kube)" || return 1
  printf '%s\n' "$dir/bin/kube-apiserver" "$dir/bin/kubectl"
}

# --- envtest assets -----------------------------------------------------------

# KUBEBUILDER_ASSETS for controller-runtime's envtest: one directory with
# etcd, kube-apiserver and kubectl (relative symlinks into the cache).
_k8s_build_envtest() {
  local tmp="$1" etcd="$2" apiserver="$3" kubectl="$4" root
  root="$(tc_cache_root)"
  if ! { ln -s "../${etcd#"$root"/}" "$tmp/etcd" &&
    ln -s "../${apiserver#"$root"/}" "$tmp/kube-apiserver" &&
    ln -s "../${kubectl#"$root"/}" "$tmp/kubectl"; }; then
    tc_log "error: envtest assets $KUBE_VERSION: cannot create symlinks in $tmp"
    return 1
  fi
}

ensure_envtest_assets() {
  local etcd kube apiserver kubectl dir
  etcd="$(ensure_etcd)" || return 1
  kube="$(ensure_kube)" || return 1
  apiserver="$(sed -n 1p <<<"$kube")"
  kubectl="$(sed -n 2p <<<"$kube")"
  # The marker names what the links point at: bumping etcd relinks.
  dir="$(tc_install envtest "$KUBE_VERSION" "$(go env GOVERSION) etcd-$ETCD_VERSION kube-$KUBE_VERSION" \
    _k8s_build_envtest "$etcd" "$apiserver" "$kubectl")" || return 1
  local b
  for b in etcd kube-apiserver kubectl; do
    [[ -x "$dir/$b" ]] || tc_die "envtest assets $KUBE_VERSION: $dir/$b is missing or dangling"
  done
  printf '%s\n' "$dir"
}

# --- helm ---------------------------------------------------------------------

_k8s_build_helm() {
  local tmp="$1" what="helm $HELM_VERSION" src
  local major="${KUBE_VERSION#v}"; major="${major%%.*}"
  local minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
  # Offline (`helm template`, `helm lint`) helm assumes the Kubernetes version
  # in these variables, 1.20 unless set; a -X for a variable that does not
  # exist is silently ignored, so check that they do.
  src="$(_k8s_download "$what" "helm.sh/helm/v3@$HELM_VERSION" Dir)" || return 1
  local f
  for f in pkg/chartutil pkg/lint/rules; do
    if ! grep -qs 'k8sVersionMajor = ' "$src/$f"/*.go || ! grep -qs 'k8sVersionMinor = ' "$src/$f"/*.go; then
      tc_log "error: $what: $f no longer has k8sVersionMajor/k8sVersionMinor; look for their new names"
      return 1
    fi
  done
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for f in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X $f.k8sVersionMajor=$major -X $f.k8sVersionMinor=$minor"
  done
  mkdir -p "$tmp/bin" || return 1
  GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" _k8s_step "$what" "$tmp" "$TC_K8S_BUILD_TIMEOUT" \
    go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" || return 1
  _k8s_expect "$what" "Version:\"$HELM_VERSION\"" "$tmp/bin/helm" version || return 1
  # And the version that offline rendering assumes.
  local chart="$tmp/check-chart"
  mkdir -p "$chart/templates" &&
    printf 'apiVersion: v2\nname: check\nversion: 0.1.0\nkubeVersion: ">=%s.%s.0-0"\n' "$major" "$minor" >"$chart/Chart.yaml" &&
    printf 'kube: {{ .Capabilities.KubeVersion.Version }}\n' >"$chart/templates/kube.yaml" || return 1
  HELM_CACHE_HOME="$tmp/helm-home" HELM_CONFIG_HOME="$tmp/helm-home" HELM_DATA_HOME="$tmp/helm-home" \
    _k8s_expect "$what" "kube: v$major.$minor.0" "$tmp/bin/helm" template "$chart" || return 1
  rm -rf "$chart" "$tmp/helm-home"
}

ensure_helm() {
  local dir
  # The marker names the Kubernetes version built in: bumping it rebuilds.
  dir="$(tc_install helm "$HELM_VERSION" "$(go env GOVERSION) kube-$KUBE_VERSION" _k8s_build_helm)" || return 1
  printf '%s\n' "$dir/bin/helm"
}

# --- controller-gen -----------------------------------------------------------

_k8s_build_controller_gen() {
  local tmp="$1" what="controller-gen $CONTROLLER_GEN_VERSION"
  mkdir -p "$tmp/bin" || return 1
  GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" _k8s_step "$what" "$tmp" "$TC_K8S_BUILD_TIMEOUT" \
    go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION" || return 1
  _k8s_expect "$what" "Version: $CONTROLLER_GEN_VERSION" "$tmp/bin/controller-gen" --version
}

ensure_controller_gen() {
  local dir
  dir="$(tc_install controller-gen "$CONTROLLER_GEN_VERSION" "$(go env GOVERSION)" _k8s_build_controller_gen)" || return 1
  printf '%s\n' "$dir/bin/controller-gen"
}

# --- main ---------------------------------------------------------------------

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

main() {
  tc_need_cmd go timeout awk sed grep
  local what="${1:-all}"
  (($# <= 1)) || { usage; tc_die "one argument at most"; }
  case "$what" in
    etcd) ensure_etcd ;;
    kube) ensure_kube ;;
    envtest-assets) ensure_envtest_assets ;;
    helm) ensure_helm ;;
    controller-gen) ensure_controller_gen ;;
    all)
      ensure_etcd
      ensure_kube
      ensure_envtest_assets
      ensure_helm
      ensure_controller_gen
      ;;
    env)
      local assets helm cgen kube
      assets="$(ensure_envtest_assets)"
      helm="$(ensure_helm)"
      cgen="$(ensure_controller_gen)"
      kube="$(ensure_kube)"
      printf 'KUBEBUILDER_ASSETS=%q\n' "$assets"
      printf 'HELM=%q\n' "$helm"
      printf 'CONTROLLER_GEN=%q\n' "$cgen"
      printf 'KUBECTL=%q\n' "$(sed -n 2p <<<"$kube")"
      ;;
    -h | --help | help) usage ;;
    *) usage; tc_die "unknown target '$what' (known: all etcd kube helm controller-gen envtest-assets env)" ;;
  esac
}

main "$@"
