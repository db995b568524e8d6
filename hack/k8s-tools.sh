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
# Versions are pinned here and in hack/k8s-lib.sh; bump them there only.
set -euo pipefail
# A run that waits for another's build must outwait a cold kube build.
: "${TC_LOCK_TIMEOUT:=3600}"
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/k8s-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/k8s-lib.sh"

# ETCD_VERSION and KUBE_VERSION (kube-apiserver and kubectl; also the
# Kubernetes version that helm assumes offline and the name of the envtest
# assets directory) are pinned in hack/k8s-lib.sh, shared with
# hack/node-tools.sh.
HELM_VERSION=v3.22.0
# Newest controller-tools release; builds with go1.26, k8s.io libraries v0.37
# (generates CRDs that a 1.35 API server accepts).
CONTROLLER_GEN_VERSION=v0.23.0

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
  local tmp="$1" what="kube-apiserver/kubectl $KUBE_VERSION"
  _k8s_build_kube_cmds "$what" "$tmp" kube k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl || return 1
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
