#!/usr/bin/env bash
# hack/node-tools.sh — install what a real Kubernetes node needs into the
# tool cache (see hack/lib.sh) and print where it is. test/testnode runs the
# node from these.
#
#   hack/node-tools.sh [all]     install whatever is missing, print every path
#   hack/node-tools.sh debs      containerd, runc and the CNI plugins, each
#                                Debian package unpacked into its own cache
#                                directory (nothing installed system-wide)
#                                -> their directories
#   hack/node-tools.sh kube      kubelet, kube-controller-manager,
#                                kube-scheduler, kube-proxy    -> their directory
#   hack/node-tools.sh coredns   CoreDNS with the plugins an offline
#                                cluster needs                 -> its path
#   hack/node-tools.sh images    OCI image archives of the pause program
#                                (tools/pause) and of CoreDNS  -> their directory
#   hack/node-tools.sh env       all of it, as KEY=VALUE lines (TIERCACHE_NODE_*),
#                                with etcd, kube-apiserver and kubectl from
#                                hack/k8s-tools.sh
#
# Use the env lines with `set -a; eval "$(hack/node-tools.sh env)"; set +a`.
# Paths go to stdout, logs to stderr.
#
# Sources: Debian's `containerd`, `runc` and `containernetworking-plugins`
# (`apt-get download` + `dpkg -x`, keyed by the package version apt offers;
# `iptables`, which kube-proxy, kubelet and the CNI bridge run from PATH, is
# the one package installed system-wide, as hack/ensure-redis.sh installs
# redis-server); the Kubernetes binaries from the Go module proxy in a
# throwaway module exactly as hack/k8s-tools.sh builds kube-apiserver
# (hack/k8s-lib.sh); CoreDNS from the Go module proxy with a main of our own
# that links only the plugins listed in COREDNS_PLUGINS (no `forward`: no
# upstream to forward to, and no cloud SDKs to compile); the image archives
# with tools/imagebuild -bare (go-containerregistry) from this repository.
#
# Versions are pinned here and in hack/k8s-lib.sh; bump them there only.
set -euo pipefail
# A run that waits for another's build must outwait a cold kube build.
: "${TC_LOCK_TIMEOUT:=3600}"
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/k8s-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/k8s-lib.sh"

COREDNS_VERSION=v1.14.7
# In CoreDNS's plugin.cfg order, which is the order they run in.
COREDNS_PLUGINS=(reload ready health errors log loadbalance cache kubernetes whoami)
# The images' tag; the archives' directory is keyed by a hash of what goes
# into them, so a change to tools/pause or tools/imagebuild rebuilds them.
NODE_IMAGE_TAG=1
NODE_DEBS=(containerd runc containernetworking-plugins)
# Bound on one apt-get call, in seconds.
TC_NODE_APT_TIMEOUT="${TC_NODE_APT_TIMEOUT:-600}"

# --- Debian packages, unpacked ------------------------------------------------

# _node_deb_versions fills NODE_DEB_VERSION[package] with the version apt
# would install of each of NODE_DEBS (one apt-cache call: it takes seconds),
# updating the package lists once when apt knows none of them.
declare -A NODE_DEB_VERSION=()
_node_deb_versions() {
  ((${#NODE_DEB_VERSION[@]} == 0)) || return 0
  local out pkg
  out="$(_node_apt_policy)"
  if [[ "$out" != *"Candidate: "[0-9]* ]]; then
    tc_with_lock apt timeout -k 10 "$TC_NODE_APT_TIMEOUT" \
      env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >&2 || return 1
    out="$(_node_apt_policy)"
  fi
  for pkg in "${NODE_DEBS[@]}"; do
    NODE_DEB_VERSION[$pkg]="$(awk -v p="$pkg:" '$1 == p { on = 1; next } /^[^ ]/ { on = 0 } on && $1 == "Candidate:" { print $2; exit }' <<<"$out")"
    [[ -n "${NODE_DEB_VERSION[$pkg]}" && "${NODE_DEB_VERSION[$pkg]}" != "(none)" ]] || {
      tc_log "error: apt offers no version of $pkg"
      return 1
    }
  done
}

_node_apt_policy() {
  timeout -k 5 "$TC_K8S_CHECK_TIMEOUT" apt-cache policy "${NODE_DEBS[@]}" 2>/dev/null || true
}

_node_build_deb() {
  local tmp="$1" pkg="$2" version="$3" dl="$1/deb"
  mkdir -p "$dl" || return 1
  # As root apt downloads unsandboxed anyway; saying so quiets its warning
  # about a directory its _apt user cannot enter.
  _k8s_step "$pkg $version" "$dl" "$TC_NODE_APT_TIMEOUT" \
    apt-get download -q -o APT::Sandbox::User=root "$pkg=$version" || return 1
  _k8s_step "$pkg $version" "$dl" "$TC_K8S_CHECK_TIMEOUT" \
    sh -c 'dpkg-deb -x ./*.deb "$1"' sh "$tmp" || return 1
  rm -rf "$dl"
}

ensure_deb() {
  local pkg="$1"
  _node_deb_versions || return 1
  tc_install "$pkg" "${NODE_DEB_VERSION[$pkg]}" "deb" _node_build_deb "$pkg" "${NODE_DEB_VERSION[$pkg]}"
}

ensure_debs() {
  tc_apt_install iptables iptables >/dev/null || return 1
  _node_deb_versions || return 1
  local p
  for p in "${NODE_DEBS[@]}"; do ensure_deb "$p" || return 1; done
}

# --- kubelet, kube-controller-manager, kube-scheduler, kube-proxy ------------

NODE_KUBE_CMDS=(kubelet kube-controller-manager kube-scheduler kube-proxy)

_node_build_kube() {
  local tmp="$1" what="node binaries $KUBE_VERSION" c pkgs=()
  for c in "${NODE_KUBE_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  _k8s_build_kube_cmds "$what" "$tmp" node "${pkgs[@]}" || return 1
  for c in "${NODE_KUBE_CMDS[@]}"; do
    _k8s_expect "$what" "Kubernetes $KUBE_VERSION" "$tmp/bin/$c" --version || return 1
  done
}

ensure_node_kube() {
  tc_install kube-node "$KUBE_VERSION" "$(go env GOVERSION)" _node_build_kube
}

# --- CoreDNS ------------------------------------------------------------------

_node_build_coredns() {
  local tmp="$1" what="coredns $COREDNS_VERSION" mod="$1/build" upstream p
  local module=github.com/coredns/coredns
  upstream="$(_k8s_download "$what" "$module@$COREDNS_VERSION" GoMod)" || return 1
  _k8s_gomod "$mod" tiercache.local/node-tools/coredns "$upstream" || return 1
  # CoreDNS's own main imports core/plugin, which links every plugin; this
  # one links the listed ones and runs them in that order.
  {
    printf '// Generated by hack/node-tools.sh: CoreDNS with only these plugins.\npackage main\n\nimport (\n'
    printf '\t"github.com/coredns/coredns/core/dnsserver"\n\t"github.com/coredns/coredns/coremain"\n\n'
    for p in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
    printf ')\n\nfunc main() {\n\tdnsserver.Directives = []string{\n'
    for p in "${COREDNS_PLUGINS[@]}"; do printf '\t\t"%s",\n' "$p"; done
    printf '\t}\n\tcoremain.Run()\n}\n'
  } >"$mod/main.go" || return 1
  GOFLAGS="-mod=mod -buildvcs=false" _k8s_step "$what" "$mod" "$TC_K8S_FETCH_TIMEOUT" \
    go get "$module@$COREDNS_VERSION" || return 1
  GOFLAGS="-mod=mod -buildvcs=false" _k8s_step "$what" "$mod" "$TC_K8S_BUILD_TIMEOUT" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/bin/coredns" . || return 1
  _k8s_expect "$what" "CoreDNS-${COREDNS_VERSION#v}" "$tmp/bin/coredns" -version || return 1
  local plugins
  plugins="$(timeout 10 "$tmp/bin/coredns" -plugins 2>&1)" || return 1
  # One plugin a line (the kubernetes plugin brings metadata, prometheus
  # and transfer along, registered but not in the directives).
  for p in "${COREDNS_PLUGINS[@]}"; do
    grep -qx "[[:space:]]*\(dns\.\)\{0,1\}$p" <<<"$plugins" || { tc_log "error: $what: plugin $p missing from: $plugins"; return 1; }
  done
  if grep -qx '[[:space:]]*\(dns\.\)\{0,1\}forward' <<<"$plugins"; then
    tc_log "error: $what: forward is linked in"
    return 1
  fi
}

ensure_coredns() {
  local dir
  dir="$(tc_install coredns "$COREDNS_VERSION" "$(go env GOVERSION) ${COREDNS_PLUGINS[*]}" _node_build_coredns)" || return 1
  printf '%s\n' "$dir/bin/coredns"
}

# --- image archives -----------------------------------------------------------

# _node_images_key prints a hash of what the image archives are made of:
# the tools' sources, go.sum, and the commands that pack them.
_node_images_key() {
  {
    (cd "$TC_ROOT" && find go.sum tools/pause tools/imagebuild -type f ! -name '*_test.go' -print0 |
      sort -z | xargs -0 cat) &&
      declare -f _node_build_images &&
      printf '%s %s' "$COREDNS_VERSION" "$NODE_IMAGE_TAG"
  } | sha256sum | cut -c1-12
}

# The images are -bare (one layer, run as root: CoreDNS binds port 53) for
# the node's platform, the one pause and CoreDNS are built for.
_node_build_images() {
  local tmp="$1" coredns="$2" what="node images" platform
  platform="linux/$(go env GOARCH)" || return 1
  mkdir -p "$tmp/bin" || return 1
  CGO_ENABLED=0 _k8s_step "$what" "$TC_ROOT" "$TC_K8S_BUILD_TIMEOUT" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/bin/" ./tools/pause ./tools/imagebuild || return 1
  _k8s_step "$what" "$tmp" "$TC_K8S_CHECK_TIMEOUT" \
    "$tmp/bin/imagebuild" -bare -o pause.tar -name "tiercache.local/pause:$NODE_IMAGE_TAG" \
    -platform "$platform=$tmp/bin" -file /pause=pause -entrypoint /pause || return 1
  _k8s_step "$what" "$tmp" "$TC_K8S_CHECK_TIMEOUT" \
    "$tmp/bin/imagebuild" -bare -o coredns.tar -name "tiercache.local/coredns:${COREDNS_VERSION#v}" \
    -platform "$platform=$(dirname "$coredns")" -file "/coredns=$(basename "$coredns")" -entrypoint /coredns || return 1
}

ensure_images() {
  local coredns
  coredns="$(ensure_coredns)" || return 1
  tc_install node-images "$(_node_images_key)" "$(go env GOVERSION)" _node_build_images "$coredns"
}

# --- main ---------------------------------------------------------------------

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

main() {
  tc_need_cmd go timeout awk sed grep sha256sum apt-get apt-cache dpkg-deb
  local what="${1:-all}"
  (($# <= 1)) || { usage; tc_die "one argument at most"; }
  case "$what" in
    debs) ensure_debs ;;
    kube) ensure_node_kube ;;
    coredns) ensure_coredns ;;
    images) ensure_images ;;
    all)
      ensure_debs
      ensure_node_kube
      ensure_coredns
      ensure_images
      ;;
    env)
      local containerd runc cni kube images k8s
      local debs
      debs="$(ensure_debs)"
      containerd="$(sed -n 1p <<<"$debs")"
      runc="$(sed -n 2p <<<"$debs")"
      cni="$(sed -n 3p <<<"$debs")"
      kube="$(ensure_node_kube)"
      images="$(ensure_images)"
      k8s="$(bash "$TC_ROOT/hack/k8s-tools.sh" etcd && bash "$TC_ROOT/hack/k8s-tools.sh" kube)"
      printf 'TIERCACHE_NODE_CONTAINERD_BIN=%q\n' "$containerd/usr/bin"
      printf 'TIERCACHE_NODE_RUNC=%q\n' "$runc/usr/sbin/runc"
      printf 'TIERCACHE_NODE_CNI_BIN=%q\n' "$cni/usr/lib/cni"
      printf 'TIERCACHE_NODE_KUBE_BIN=%q\n' "$kube/bin"
      printf 'TIERCACHE_NODE_IMAGES=%q\n' "$images"
      printf 'TIERCACHE_NODE_ETCD=%q\n' "$(sed -n 1p <<<"$k8s")"
      printf 'TIERCACHE_NODE_APISERVER=%q\n' "$(sed -n 2p <<<"$k8s")"
      printf 'TIERCACHE_NODE_KUBECTL=%q\n' "$(sed -n 3p <<<"$k8s")"
      ;;
    -h | --help | help) usage ;;
    *) usage; tc_die "unknown target '$what' (known: all debs kube coredns images env)" ;;
  esac
}

main "$@"
