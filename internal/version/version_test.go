package version

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	vcs := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for name, tc := range map[string]struct {
		version, revision string
		buildInfo         func() (*debug.BuildInfo, bool)
		want              Info
	}{
		"a stamped build reports what was stamped, whatever the toolchain recorded": {
			version: "1.2.3", revision: "abc", buildInfo: vcs(debug.BuildSetting{Key: "vcs.revision", Value: "def"}),
			want: Info{Version: "1.2.3", Revision: "abc", GoVersion: "go1.26.0"},
		},
		"an unstamped build is the development version at the toolchain's revision": {
			buildInfo: vcs(debug.BuildSetting{Key: "vcs.modified", Value: "true"}, debug.BuildSetting{Key: "vcs.revision", Value: "def"}),
			want:      Info{Version: DevVersion, Revision: "def", GoVersion: "go1.26.0"},
		},
		"a stamped version with no stamped revision takes the toolchain's": {
			version: "1.2.3", buildInfo: vcs(debug.BuildSetting{Key: "vcs.revision", Value: "def"}),
			want: Info{Version: "1.2.3", Revision: "def", GoVersion: "go1.26.0"},
		},
		"a build outside a git checkout has an unknown revision": {
			buildInfo: vcs(debug.BuildSetting{Key: "-trimpath", Value: "true"}),
			want:      Info{Version: DevVersion, Revision: "unknown", GoVersion: "go1.26.0"},
		},
		"a binary without build info has an unknown revision": {
			buildInfo: none,
			want:      Info{Version: DevVersion, Revision: "unknown", GoVersion: "go1.26.0"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := resolve(tc.version, tc.revision, "go1.26.0", tc.buildInfo); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGetInATestBinaryIsTheDevelopmentVersionOfThisGo(t *testing.T) {
	i := Get()
	if i.Version != DevVersion || i.GoVersion == "" || i.Revision == "" {
		t.Errorf("Get() = %+v; want version %s, a revision and a Go version", i, DevVersion)
	}
	if s := i.String(); !strings.HasPrefix(s, DevVersion+" (revision "+i.Revision+", go") {
		t.Errorf("String() = %q", s)
	}
}

func TestCollectorIsOneWithTheBuildAsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Version: "1.2.3", Revision: "abc", GoVersion: "go1.26.0"}.Collector())
	want := `
# HELP tiercache_build_info Always 1; the labels name the build: version, git revision and Go version.
# TYPE tiercache_build_info gauge
tiercache_build_info{goversion="go1.26.0",revision="abc",version="1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricBuildInfo); err != nil {
		t.Error(err)
	}
}

// TestALinkerStampedBuildReportsTheStampedValues builds a command with the
// -X flags the Makefile passes and runs its --version: the variables'
// import path and names are what the linker stamps.
func TestALinkerStampedBuildReportsTheStampedValues(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not building a binary")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "tiercache-sidecar")
	const pkg = "github.com/tiercache/tiercache/internal/version"
	build := exec.CommandContext(ctx, goCmd, "build", "-trimpath",
		"-ldflags", "-X "+pkg+".version=9.8.7-stamped -X "+pkg+".revision=0123456789abcdef",
		"-o", bin, "./cmd/sidecar")
	build.Dir = filepath.Join("..", "..")
	build.WaitDelay = 10 * time.Second
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v (%v)\n%s", err, ctx.Err(), out)
	}
	run := exec.CommandContext(ctx, bin, "--version")
	run.WaitDelay = 10 * time.Second
	out, err := run.Output()
	if err != nil {
		t.Fatalf("tiercache-sidecar --version: %v (%v)", err, ctx.Err())
	}
	want := "tiercache-sidecar 9.8.7-stamped (revision 0123456789abcdef, go"
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("tiercache-sidecar --version printed %q, want it to start with %q", out, want)
	}
}
