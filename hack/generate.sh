#!/usr/bin/env bash
# hack/generate.sh — regenerate what is derived from the tier-config model:
# controller-gen's deep-copy functions of internal/api and of the leaf types
# of internal/tierconfig that the API shares, the CRD in config/crd/ (and its
# copy in the chart, files/crds/, which templates/crds.yaml installs, when the
# chart exists), and tools/convertgen's CacheTier → config conversion
# (internal/operator/render/zz_generated.convert.go).
#
#   hack/generate.sh          write the generated files (make generate)
#   hack/generate.sh --check  generate into a scratch copy and fail, with the
#                             diff, if the committed files differ (make test)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cg="$(bash hack/k8s-tools.sh controller-gen)"

# gen ROOT: generate into the tree at ROOT (a copy of the repository's
# generated inputs and outputs).
gen() {
  local root="$1"
  (cd "$root" && "$cg" object paths=./internal/api/... paths=./internal/tierconfig \
    crd paths=./internal/api/... output:crd:artifacts:config=config/crd)
  if [[ -d "$root/charts/tiercache/files/crds" ]]; then
    cp "$root"/config/crd/*.yaml "$root/charts/tiercache/files/crds/"
  fi
  (cd "$root" && go run ./tools/convertgen \
    -src github.com/tiercache/tiercache/internal/api/v1alpha1 \
    -dst github.com/tiercache/tiercache/internal/tierconfig \
    -root CacheTierSpec=Config \
    -hand internal/operator/render/convert.go \
    -out internal/operator/render/zz_generated.convert.go)
}

if [[ "${1:-}" != "--check" ]]; then
  gen .
  exit 0
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# The generators load the packages, so the copy needs the module files and
# the packages with their imports (all of internal/); outputs are copied
# too so the diff sees deletions.
mkdir -p "$scratch/config" "$scratch/tools"
cp go.mod go.sum "$scratch/"
cp -r internal "$scratch/"
cp -r tools/convertgen "$scratch/tools/"
cp -r config/crd "$scratch/config/"
if [[ -d charts/tiercache/files/crds ]]; then
  mkdir -p "$scratch/charts/tiercache/files"
  cp -r charts/tiercache/files/crds "$scratch/charts/tiercache/files/"
fi
gen "$scratch"
status=0
for d in internal/api internal/tierconfig internal/operator/render config/crd charts/tiercache/files/crds; do
  [[ -d "$d" ]] || continue
  if ! diff -ru "$d" "$scratch/$d"; then
    status=1
  fi
done
if ((status)); then
  echo "generated files are stale: run 'make generate' and commit the result" >&2
fi
exit "$status"
