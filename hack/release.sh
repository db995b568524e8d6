#!/usr/bin/env bash
# hack/release.sh — every artifact of a release, into one directory, with
# no network but the Go module proxy (for a cold build's modules). Run by
# `make release`, which passes the variables below; see README.md,
# "Releasing", for publishing what it writes.
#
#   <RELEASE_OUT>/                                 (default bin/release/<VERSION>/)
#     kubectl-tiercache_<VERSION>_<os>_<arch>.tar.gz   linux and darwin, amd64 and arm64
#     tiercache.krew.yaml                              the krew manifest of those archives
#     tiercache-<VERSION>.tgz                          the chart: version and appVersion <VERSION>
#     tiercache-<VERSION>.oci.tar                      the image, linux/amd64 and linux/arm64 under one index
#     SHA256SUMS                                       sha256sum of each file above
#
# Inputs (environment): VERSION (a semantic version without a leading v:
# the chart needs one, and so does krew), REVISION, GO, MAKE,
# RELEASE_OUT, RELEASE_URL (where the plugin archives will be downloaded
# from: the krew manifest's uris), RELEASE_GO_LDFLAGS, IMAGE_REPO,
# IMAGE_SOURCE, IMAGE_CONTENT (imagebuild's -file and -entrypoint flags,
# the Makefile's, shared with `make image`), SOURCE_DATE_EPOCH (0 when
# unset), HELM (else hack/k8s-tools.sh builds it into the tool cache).
#
# Intermediate files go to <RELEASE_OUT>.work/, the artifacts to
# <RELEASE_OUT>.tmp/, which replaces <RELEASE_OUT> only once every
# artifact is written and checked: the checksums with `sha256sum --check`
# and the krew manifest against the archives (`krewplugin -check`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TC_ROOT"

: "${VERSION:?VERSION is not set (run make release)}"
: "${REVISION=}"
GO="${GO:-go}"
MAKE="${MAKE:-make}"
RELEASE_OUT="${RELEASE_OUT:-bin/release/$VERSION}"
IMAGE_REPO="${IMAGE_REPO:?}"
IMAGE_SOURCE="${IMAGE_SOURCE:?}"
IMAGE_CONTENT="${IMAGE_CONTENT:?}"
RELEASE_URL="${RELEASE_URL:-$IMAGE_SOURCE/releases/download/v$VERSION}"
RELEASE_GO_LDFLAGS="${RELEASE_GO_LDFLAGS:?}"
PLUGIN_PLATFORMS=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
IMAGE_ARCHS=(amd64 arm64)

# A semantic version (semver.org's grammar) without build metadata: the
# chart's version and the krew manifest's must be one, and a "+" cannot
# be in an image tag. git describe's 0.1.0-3-gabc1234(-dirty) after a tag
# is one; the bare commit it gives before the first tag is not.
ident='(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)'
if [[ ! "$VERSION" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-$ident(\.$ident)*)?$ ]]; then
  tc_die "VERSION=$VERSION is not a semantic version (MAJOR.MINOR.PATCH[-PRERELEASE], no +build): tag the release commit (git tag v0.1.0) or pass VERSION=0.1.0 (a trial: VERSION=0.0.0-dev)"
fi

tc_need_cmd sha256sum tar
start=$SECONDS
step() { tc_log "[release $VERSION, $((SECONDS - start))s] $*"; }

out="$RELEASE_OUT"
work="$out.work"
stage="$out.tmp"
rm -rf "$work" "$stage"
mkdir -p "$work/bin" "$stage"

step "tools: imagebuild, krewplugin (for this machine)"
for t in imagebuild krewplugin; do
  GOOS= GOARCH= CGO_ENABLED=0 "$GO" build -o "$work/bin/$t" "./tools/$t"
done

helm="${HELM:-}"
if [[ -z "$helm" ]]; then
  step "helm (hack/k8s-tools.sh helm; built once into the tool cache)"
  helm="$(bash hack/k8s-tools.sh helm)"
fi

# The plugin: static, like the release binaries.
plugin_args=()
for p in "${PLUGIN_PLATFORMS[@]}"; do
  step "kubectl-tiercache for $p"
  d="$work/plugin/${p/\//-}"
  mkdir -p "$d"
  CGO_ENABLED=0 GOOS="${p%/*}" GOARCH="${p#*/}" \
    "$GO" build -trimpath -ldflags "$RELEASE_GO_LDFLAGS" -o "$d/kubectl-tiercache" ./cmd/kubectl-tiercache
  plugin_args+=(-platform "$p=$d/kubectl-tiercache")
done
step "plugin archives and the krew manifest"
"$work/bin/krewplugin" -o "$stage" -version "$VERSION" -url "$RELEASE_URL" -license LICENSE "${plugin_args[@]}"

# The image: make build-release's binaries (the Dockerfile's) for each
# architecture, under one index.
image_args=()
for arch in "${IMAGE_ARCHS[@]}"; do
  step "image binaries for linux/$arch (make build-release)"
  d="$work/image/linux-$arch"
  GOOS=linux GOARCH="$arch" "$MAKE" --no-print-directory build-release \
    RELEASE_DIR="$d" GO="$GO" VERSION="$VERSION" REVISION="$REVISION" >&2
  image_args+=(-platform "linux/$arch=$d")
done
step "image index (${IMAGE_ARCHS[*]})"
read -ra content <<<"$IMAGE_CONTENT"
"$work/bin/imagebuild" -o "$stage/tiercache-$VERSION.oci.tar" -name "$IMAGE_REPO:$VERSION" \
  -source "$IMAGE_SOURCE" "${image_args[@]}" "${content[@]}"

# The chart: its version and appVersion (the default image tag, since
# image.tag is empty) are the release's. helm's own homes are kept apart
# from the user's.
step "chart (helm package, helm lint --strict)"
export HELM_CONFIG_HOME="$work/helm" HELM_CACHE_HOME="$work/helm" HELM_DATA_HOME="$work/helm"
"$helm" package charts/tiercache --version "$VERSION" --app-version "$VERSION" -d "$stage" >&2
"$helm" lint --strict "$stage/tiercache-$VERSION.tgz" >&2

step "checksums, and checking them and the krew manifest"
(cd "$stage" && sha256sum -- *) >"$work/SHA256SUMS"
mv "$work/SHA256SUMS" "$stage/SHA256SUMS"
(cd "$stage" && sha256sum --check --strict --quiet SHA256SUMS)
"$work/bin/krewplugin" -check "$stage/tiercache.krew.yaml" "${PLUGIN_PLATFORMS[@]/#/-platform=}"

rm -rf "$out"
mv "$stage" "$out"
rm -rf "$work"
step "done: $out"
(cd "$out" && ls -l) >&2
