// Package version owns the build's identity: the release version and the
// VCS revision stamped at link time, and the Go version that built it.
// Every command shows the same three values the same way: --version, the
// tiercache_build_info gauge (sidecar and operator), and the operator's
// log line at start.
//
// make build and make build-release stamp them with
//
//	-ldflags "-X github.com/tiercache/tiercache/internal/version.version=$(VERSION)
//	          -X github.com/tiercache/tiercache/internal/version.revision=$(REVISION)"
//
// Unstamped (go build, go run, go test) the version is DevVersion and the
// revision is the one the Go toolchain recorded (vcs.revision), or
// "unknown" outside a git checkout.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision are set by the linker (-X) and never written
// otherwise: read them through Get.
var (
	version  string
	revision string
)

// DevVersion is the version of a build that was not stamped.
const DevVersion = "0.0.0-dev"

// unknownRevision is the revision of an unstamped build with no VCS data.
const unknownRevision = "unknown"

// MetricBuildInfo is the gauge every Tiercache command exports: 1, with
// the Info as labels.
const MetricBuildInfo = "tiercache_build_info"

// Info identifies a build.
type Info struct {
	// Version is the release version without a leading "v" (0.1.0, or
	// git describe's 0.1.0-3-gabc1234-dirty between releases).
	Version string `json:"version"`
	// Revision is the git commit the build came from.
	Revision string `json:"revision"`
	// GoVersion is the Go toolchain that built it (runtime.Version).
	GoVersion string `json:"goVersion"`
}

// Get returns this binary's Info.
func Get() Info {
	return resolve(version, revision, runtime.Version(), debug.ReadBuildInfo)
}

// resolve fills in what the linker left empty: the version with
// DevVersion, the revision with the toolchain's vcs.revision.
func resolve(stampedVersion, stampedRevision, goVersion string, buildInfo func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: stampedVersion, Revision: stampedRevision, GoVersion: goVersion}
	if i.Version == "" {
		i.Version = DevVersion
	}
	if i.Revision == "" {
		i.Revision = unknownRevision
		if bi, ok := buildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && s.Value != "" {
					i.Revision = s.Value
				}
			}
		}
	}
	return i
}

// String is the line --version prints after the command's name:
// "0.1.0 (revision 0123abcd…, go1.26.0)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// Collector is the tiercache_build_info gauge for i: always 1, with
// version, revision and goversion labels (Prometheus' own
// prometheus_build_info convention), so a query can join any series to
// the build that produced it.
func (i Info) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricBuildInfo,
		Help: "Always 1; the labels name the build: version, git revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version":   i.Version,
			"revision":  i.Revision,
			"goversion": i.GoVersion,
		},
	}, func() float64 { return 1 })
}
