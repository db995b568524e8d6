package operator

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"

	tcversion "github.com/tiercache/tiercache/internal/version"
)

func noEnv(string) string { return "" }

func TestVersionPrintsTheBuildWithoutOtherFlagsOrAnAPIServer(t *testing.T) {
	var out, errOut strings.Builder
	// No --namespace and no POD_NAMESPACE, which a run requires.
	if err := RunWith(context.Background(), []string{"--version"}, Env{Getenv: noEnv, Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatalf("RunWith --version: %v", err)
	}
	if want := "tiercache-operator " + tcversion.Get().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
	if errOut.Len() != 0 {
		t.Errorf("--version wrote to stderr: %q", errOut.String())
	}
}

// lockedBuilder is a strings.Builder the operator's goroutines may write
// to while the test reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTheFirstLogLineAndTheMetricsNameTheBuild runs the operator against
// an API server that is not there: it fails creating its manager, but the
// build is already in its first log line and in its registry, so a crash
// loop's log says which version crashed.
func TestTheFirstLogLineAndTheMetricsNameTheBuild(t *testing.T) {
	reg := prometheus.NewRegistry()
	var log lockedBuilder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := RunWith(ctx, []string{
		"--namespace=tiercache-system", "--cert-mode=external", "--xds-listen=", "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
	}, Env{Getenv: noEnv, Stderr: &log, RestConfig: &rest.Config{Host: "http://127.0.0.1:1", Timeout: 2 * time.Second},
		Registerer: reg, SkipNameValidation: true})
	t.Logf("RunWith without an API server: %v", err)

	build := tcversion.Get()
	first, _, _ := strings.Cut(log.String(), "\n")
	var line struct{ Msg, Version, Revision, GoVersion string }
	if err := json.Unmarshal([]byte(first), &line); err != nil {
		t.Fatalf("first log line %q: %v", first, err)
	}
	if line.Msg != "starting" || line.Version != build.Version || line.Revision != build.Revision || line.GoVersion != build.GoVersion {
		t.Errorf("first log line %q; want msg starting, version %s, revision %s, goVersion %s", first, build.Version, build.Revision, build.GoVersion)
	}
	checkBuildInfo(t, reg, build)
}

// checkBuildInfo: reg holds tiercache_build_info for build.
func checkBuildInfo(t *testing.T, reg prometheus.Gatherer, build tcversion.Info) {
	t.Helper()
	want := `# HELP tiercache_build_info Always 1; the labels name the build: version, git revision and Go version.
# TYPE tiercache_build_info gauge
tiercache_build_info{goversion="` + build.GoVersion + `",revision="` + build.Revision + `",version="` + build.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), tcversion.MetricBuildInfo); err != nil {
		t.Error(err)
	}
}

func TestTheSuiteOperatorsMetricsNameTheBuild(t *testing.T) {
	needCluster(t)
	checkBuildInfo(t, cluster.reg, tcversion.Get())
}
