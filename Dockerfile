# syntax=docker/dockerfile:1
#
# Tiercache image: both commands, static, on distroless, non-root.
#   docker build --build-arg VERSION=<version> --build-arg REVISION=$(git rev-parse HEAD) \
#     -t ghcr.io/tiercache/tiercache:<version> .
# The entrypoint is the sidecar (the operator injects this image with only
# args); the chart's operator Deployment runs /tiercache-operator.
#
# The build step is `make build-release` and nothing else, so what CI
# builds and tests (internal/release runs the same target and checks the
# binaries copied below exist and are static) is what ships.
#
# Without Docker, `make image` writes the same image as an OCI archive
# (tools/imagebuild); internal/release holds it to the COPY, USER and
# ENTRYPOINT below.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first: this layer is reused while go.mod and go.sum hold.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version and commit the binaries report (--version,
# tiercache_build_info): the build context has no .git, so make cannot
# ask git; without them the binaries say 0.0.0-dev, revision unknown.
ARG VERSION
ARG REVISION
RUN make build-release

FROM gcr.io/distroless/static:nonroot
COPY --from=build /src/bin/release/tiercache-sidecar /tiercache-sidecar
COPY --from=build /src/bin/release/tiercache-operator /tiercache-operator
# distroless' nonroot user, the uid the chart and the injected sidecar
# run as (runAsNonRoot needs it numeric).
USER 65532:65532
ENTRYPOINT ["/tiercache-sidecar"]
