# Tiercache: the one way to build and test. `make help` lists the targets.
# Everything a target needs is installed on first use by scripts in hack/,
# into ${XDG_CACHE_HOME:-~/.cache}/tiercache (outside the repository).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# The steps of `make test` run in order, even under -j.
.NOTPARALLEL:

GO ?= go
FUZZTIME ?= 8s
export FUZZTIME

# cmd/<dir> → bin/<name>; other cmd/ directories build under their own name.
# tools/<dir> (the demo origin and the load generator: tooling, not the
# product) → bin/<dir>. Every binary is built with CGO off: static, so
# that any of them runs in an image as built (the real-node e2e runs
# bin/demo-origin as its app; a cgo build links the machine's libc).
# The version and revision stamped into every binary (internal/version):
# `git describe` without its leading "v" (0.1.0 on a tag, 0.1.0-3-gabc1234
# after it, the short commit before the first tag, -dirty with local
# changes), else 0.0.0-dev; the full commit, else empty, which leaves the
# one the Go toolchain recorded. Outside a git checkout (the Docker build
# context has no .git) pass them: make build-release VERSION=0.1.0
# REVISION=<commit>, or docker build --build-arg VERSION=... --build-arg
# REVISION=....
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
override VERSION := $(patsubst v%,%,$(or $(strip $(VERSION)),0.0.0-dev))
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
override REVISION := $(strip $(REVISION))
VERSION_PKG := github.com/tiercache/tiercache/internal/version
VERSION_LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)

# Recipes whose tests start redis-server begin with this: hack/ensure-redis.sh
# installs it into the tool cache (on first use) and test/testredis runs the
# one TIERCACHE_REDIS_SERVER names. (An assignment of its own, not `export
# X=$$(...)`, so that a failing install fails the recipe.)
REDIS_ENV = TIERCACHE_REDIS_SERVER="$$(bash hack/ensure-redis.sh)"; export TIERCACHE_REDIS_SERVER

BIN_NAME_sidecar := tiercache-sidecar
BIN_NAME_operator := tiercache-operator
CMD_DIRS = $(patsubst %/,%,$(sort $(dir $(wildcard cmd/*/*.go) $(wildcard tools/*/*.go))))


.PHONY: e2e
e2e: ## Run only the end-to-end test (helm, API server, operator, sidecars, Redis)
	$(REDIS_ENV); set -a; eval "$$(bash hack/k8s-tools.sh env)"; set +a; \
	TIERCACHE_REQUIRE_ENVTEST=1 $(GO) test -count=1 -timeout 10m -v ./e2e/

.PHONY: help build build-release image release test test-unit test-alloc test-node lint check-generated generate fuzz-short fuzz demo-smoke demo demo-cluster demo-cluster-smoke bench clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  make %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build the commands into bin/, static (tiercache-sidecar, tiercache-operator, kubectl-tiercache; tools: demo-origin, loadgen, imagebuild, krewplugin, democluster, gofloor, pause, convertgen), VERSION and REVISION stamped
	@mkdir -p bin
	@for d in $(CMD_DIRS); do \
		case "$$d" in cmd/sidecar) n=$(BIN_NAME_sidecar) ;; cmd/operator) n=$(BIN_NAME_operator) ;; *) n=$${d#*/} ;; esac; \
		echo "CGO_ENABLED=0 go build -trimpath -ldflags '$(VERSION_LDFLAGS)' -o bin/$$n ./$$d"; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(VERSION_LDFLAGS)" -o "bin/$$n" "./$$d"; \
	done

# The release binaries, exactly as the Dockerfile builds them (it runs this
# target; internal/release checks that it still does and that the binaries
# it copies come out static). CGO off for a static binary on
# distroless/static, -trimpath and -s -w for reproducible, smaller
# binaries, VERSION and REVISION stamped (-X) as in build.
# RELEASE_DIR: `make image` builds each platform's into a directory of
# its own (GOOS and GOARCH in the environment).
RELEASE_LDFLAGS ?= -s -w
RELEASE_DIR ?= bin/release
build-release: ## Build static release binaries into bin/release/ (the Dockerfile runs this; VERSION, REVISION)
	@mkdir -p $(RELEASE_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS) $(VERSION_LDFLAGS)" -o $(RELEASE_DIR)/tiercache-sidecar ./cmd/sidecar
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS) $(VERSION_LDFLAGS)" -o $(RELEASE_DIR)/tiercache-operator ./cmd/operator

# The images, as OCI image archives, without a container engine
# (tools/imagebuild, on go-containerregistry): the Dockerfile's image
# (build-release's two binaries, user 65532:65532, CA certificates, the
# sidecar as entrypoint) as $(IMAGE_REPO):$(VERSION), and the demo
# origin's as $(DEMO_IMAGE_REPO):$(VERSION), for linux/$(IMAGE_ARCH)
# (the Go architecture by default: GOARCH=arm64 or IMAGE_ARCH=arm64 for
# another). Reproducible: every time in them is SOURCE_DATE_EPOCH (0
# when unset), so the same tree and toolchain give the same digests.
# IMAGE_REPO is the chart's image.repository (internal/release checks).
IMAGE_REPO ?= ghcr.io/tiercache/tiercache
DEMO_IMAGE_REPO ?= ghcr.io/tiercache/demo-origin
IMAGE_ARCH ?= $(or $(GOARCH),$(shell $(GO) env GOARCH))
IMAGE_OUT ?= bin/image
IMAGE_BIN = $(IMAGE_OUT)/linux-$(IMAGE_ARCH)
IMAGE_SOURCE = https://github.com/tiercache/tiercache
# What the product image holds and runs (make image, make release).
IMAGE_CONTENT = -file /tiercache-sidecar=tiercache-sidecar -file /tiercache-operator=tiercache-operator \
	-entrypoint /tiercache-sidecar

image: ## Build the images as OCI archives in bin/image/ (tiercache-VERSION-linux-ARCH.oci.tar, demo-origin-...; no Docker)
	@mkdir -p $(IMAGE_BIN)
	GOOS=linux GOARCH=$(IMAGE_ARCH) $(MAKE) --no-print-directory build-release RELEASE_DIR=$(IMAGE_BIN)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $(IMAGE_BIN)/demo-origin ./tools/demo-origin
	GOOS= GOARCH= $(GO) build -o $(IMAGE_OUT)/imagebuild ./tools/imagebuild
	$(IMAGE_OUT)/imagebuild -o $(IMAGE_OUT)/tiercache-$(VERSION)-linux-$(IMAGE_ARCH).oci.tar \
		-name $(IMAGE_REPO):$(VERSION) -source $(IMAGE_SOURCE) -platform linux/$(IMAGE_ARCH)=$(IMAGE_BIN) \
		$(IMAGE_CONTENT)
	$(IMAGE_OUT)/imagebuild -o $(IMAGE_OUT)/demo-origin-$(VERSION)-linux-$(IMAGE_ARCH).oci.tar \
		-name $(DEMO_IMAGE_REPO):$(VERSION) -source $(IMAGE_SOURCE) -platform linux/$(IMAGE_ARCH)=$(IMAGE_BIN) \
		-file /demo-origin=demo-origin -entrypoint /demo-origin -arg=--listen=:8081

# Every artifact of a release, into $(RELEASE_OUT), by hack/release.sh
# (its header lists them): the kubectl plugin's archives for linux and
# darwin on amd64 and arm64 (tools/krewplugin) and their krew manifest,
# whose uris start with RELEASE_URL; the chart packaged with version and
# appVersion VERSION; the image for linux/amd64 and linux/arm64 under one
# index (tools/imagebuild, IMAGE_REPO:VERSION); SHA256SUMS. No network
# but the Go module proxy. VERSION must be a semantic version
# (git describe after a tag is; before the first tag pass VERSION=...).
RELEASE_OUT ?= bin/release/$(VERSION)
RELEASE_URL ?= $(IMAGE_SOURCE)/releases/download/v$(VERSION)
release: ## Build every release artifact into bin/release/VERSION/: plugin archives + krew manifest, chart, multi-arch image archive, SHA256SUMS
	VERSION='$(VERSION)' REVISION='$(REVISION)' GO='$(GO)' MAKE='$(MAKE)' \
	RELEASE_OUT='$(RELEASE_OUT)' RELEASE_URL='$(RELEASE_URL)' \
	RELEASE_GO_LDFLAGS='$(RELEASE_LDFLAGS) $(VERSION_LDFLAGS)' \
	IMAGE_REPO='$(IMAGE_REPO)' IMAGE_SOURCE='$(IMAGE_SOURCE)' IMAGE_CONTENT='$(IMAGE_CONTENT)' \
	bash hack/release.sh

test: lint check-generated test-unit test-alloc test-node fuzz-short demo-smoke demo-cluster-smoke ## Lint, generated-file check, unit and envtest tests with -race, allocation tests without it, the real-node test, short fuzz runs, demo smoke tests (process and real cluster)

# The Kubernetes tools (etcd, kube-apiserver, kubectl, helm, controller-gen)
# are built on first use (~15 min cold, cached after). With
# TIERCACHE_REQUIRE_ENVTEST=1 the API-server tests fail instead of skipping
# when KUBEBUILDER_ASSETS is missing.
test-unit: ## Run every package's tests with the race detector (real redis-server, real API server)
	$(REDIS_ENV); set -a; eval "$$(bash hack/k8s-tools.sh env)"; set +a; \
	TIERCACHE_REQUIRE_ENVTEST=1 $(GO) test -race -count=1 -timeout 20m ./...

# Allocation tests (testing.AllocsPerRun, the L1 hit path's among them)
# skip under the race detector, which allocates on its own, and test-unit
# runs everything under it: this runs them without it. The packages are
# those with a test whose name has "Alloc" in it (name a new one so).
ALLOC_PKGS = $(sort $(dir $(shell grep -rlE --include='*_test.go' '^func Test[A-Za-z0-9_]*Alloc' internal)))

test-alloc: ## Run the allocation tests (the L1 hit path's among them) without -race
	$(REDIS_ENV); $(GO) test -count=1 -run 'Alloc' $(addprefix ./,$(ALLOC_PKGS))

# A real single-node cluster (test/testnode) in network and mount
# namespaces of its own; its tools are built into the cache by
# hack/node-tools.sh on first use (about 10 min cold, under a second warm).
# On it, e2e/pods walks the user's path in real pods with the images
# `make image` builds (the chart's helm install, the bundled Redis, an
# annotated Deployment, the plugin, faults under load; about 3 min warm).
# TIERCACHE_REQUIRE_NODE=1: a machine that cannot run it fails here
# instead of skipping. -p 1: one node at a time.
E2E_IMAGE_ENV = TIERCACHE_IMAGE=$(CURDIR)/$(IMAGE_OUT)/tiercache-$(VERSION)-linux-$(IMAGE_ARCH).oci.tar \
	TIERCACHE_IMAGE_REF=$(IMAGE_REPO):$(VERSION) \
	TIERCACHE_DEMO_IMAGE=$(CURDIR)/$(IMAGE_OUT)/demo-origin-$(VERSION)-linux-$(IMAGE_ARCH).oci.tar \
	TIERCACHE_DEMO_IMAGE_REF=$(DEMO_IMAGE_REPO):$(VERSION)
NODE_ENV = $(REDIS_ENV); set -a; eval "$$(bash hack/k8s-tools.sh env)"; eval "$$(bash hack/node-tools.sh env)"; set +a

test-node: image ## Run the real-node tests: the harness's own (test/testnode) and the user's path in real pods (e2e/pods)
	$(NODE_ENV); \
	$(E2E_IMAGE_ENV) TIERCACHE_REQUIRE_NODE=1 $(GO) test -p 1 -count=1 -timeout 20m -v ./test/testnode/ ./e2e/pods/

# E2E_RUN: a regular expression of the steps of e2e/pods' TestUserPath to
# run (install and app always run), e.g. make e2e-pods E2E_RUN=faults.
.PHONY: e2e-pods
e2e-pods: image ## Run only the real-pod e2e (e2e/pods) on a real node; E2E_RUN=regex picks its steps
	$(NODE_ENV); \
	$(E2E_IMAGE_ENV) TIERCACHE_REQUIRE_NODE=1 E2E_RUN='$(E2E_RUN)' $(GO) test -count=1 -timeout 15m -v -run TestUserPath ./e2e/pods/

generate: ## Regenerate deep-copy code, the CRD (config/crd) and the CacheTier → config conversion (tools/convertgen)
	bash hack/generate.sh

check-generated: ## Fail if the generated files differ from what the API types generate
	bash hack/generate.sh --check

lint: ## go mod tidy check, gofmt, go vet, staticcheck and deadcode (tools installed into the cache on first use)
	@if ! d=$$($(GO) mod tidy -diff); then echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit the result:"; echo "$$d"; exit 1; fi
	@files=$$(find . \( -path './.?*' -o -path ./bin -o -name testdata -o -name vendor \) -prune -o -name '*.go' -print0 | xargs -0 -r gofmt -l); \
	if [[ -n "$$files" ]]; then echo "gofmt: these files need 'gofmt -w':"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	@sc=$$(bash hack/tools.sh staticcheck); echo "staticcheck ./..."; "$$sc" ./...
	@bash hack/deadcode.sh

fuzz-short: ## Run every Fuzz* target for FUZZTIME (default 8s)
	@bash hack/fuzz.sh

fuzz: ## Run every Fuzz* target for longer (FUZZTIME=60s)
	@FUZZTIME=60s bash hack/fuzz.sh

demo-smoke: ## Run the demo once and fail unless it shows MISS, HIT, then MISS after a purge
	@DEMO_ONESHOT=1 bash hack/demo.sh

demo: ## Start the demo origin and the sidecar, show MISS → HIT → purge → MISS, keep running until Ctrl-C
	@bash hack/demo.sh

# A real single-node cluster (test/testnode) with the chart, a CacheTier
# and the demo origin in real pods (tools/democluster; hack/demo-cluster.sh
# installs the node's tools first, as test-node does). Linux, root and
# namespaces only; everything stays inside a network namespace of its own.
demo-cluster: ## Start a real single-node cluster with the chart and an annotated demo app, show MISS → HIT → purge → MISS through its Service, keep running until Ctrl-C (Linux, root)
	@DEMO_CLUSTER_VERSION='$(VERSION)' DEMO_CLUSTER_LDFLAGS='$(VERSION_LDFLAGS)' GO='$(GO)' MAKE='$(MAKE)' bash hack/demo-cluster.sh

demo-cluster-smoke: ## Run demo-cluster once: fail unless it shows MISS, HIT, then MISS after a purge and leaves the machine as it was
	@DEMO_CLUSTER_ONESHOT=1 DEMO_CLUSTER_VERSION='$(VERSION)' DEMO_CLUSTER_LDFLAGS='$(VERSION_LDFLAGS)' GO='$(GO)' MAKE='$(MAKE)' bash hack/demo-cluster.sh

bench: ## Benchmarks against nginx (hits, herd, 100 MiB), L2, replicas, restarts, memory, a browser-mix replay against Varnish and nginx (results in bench-results/; BENCH_PARTS)
	@bash hack/bench.sh

.PHONY: k8s-tools
k8s-tools: ## Build etcd, kube-apiserver, kubectl, helm, controller-gen into the cache (~15 min cold)
	@bash hack/k8s-tools.sh all

clean: ## Remove bin/ and bench-results/
	rm -rf bin bench-results
