// Package release holds the tests of the release image; it has no code of
// its own. No Docker engine runs in CI, so the Dockerfile is checked by
// parts: it builds with `make build-release` and nothing else, the test
// runs that same target, and every binary the final stage copies must come
// out of it as a static executable (an ELF without an interpreter, built
// with CGO off and -trimpath), on a distroless, non-root final stage.
package release
