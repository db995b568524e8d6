package inject

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml.injected from what Inject produces now")

// Golden cases live in testdata, found by glob, so a case is added by adding
// files:
//
//	<case>.yaml           the pod as submitted
//	<case>.params.yaml    optional: a caseParams document overlaid on
//	                      defaultCaseParams (fields it omits keep the default)
//	<case>.yaml.injected  the pod Inject must produce (go test -update
//	                      rewrites it)

// caseParams is the YAML form of Params for a golden case.
type caseParams struct {
	// Tier "" means the pod's tiercache.io/tier annotation, as the webhook
	// does.
	Tier            string                       `json:"tier"`
	InitialConfig   string                       `json:"initialConfig"`
	ConfigHash      string                       `json:"configHash"`
	L1MaxSize       resource.Quantity            `json:"l1MaxSize"`
	Image           string                       `json:"image"`
	ImagePullPolicy corev1.PullPolicy            `json:"imagePullPolicy"`
	Resources       *corev1.ResourceRequirements `json:"resources"`
	Port            int32                        `json:"port"`
	AdminPort       int32                        `json:"adminPort"`
	ControlPlane    string                       `json:"controlPlane"`
	ControlPlaneCA  string                       `json:"controlPlaneCA"`
	TokenAudience   string                       `json:"tokenAudience"`
	Secrets         []SecretFile                 `json:"secrets"`
	BodyStoreSize   *resource.Quantity           `json:"bodyStoreSize"`
	BodyStoreMedium corev1.StorageMedium         `json:"bodyStoreMedium"`
	RunAsUser       *int64                       `json:"runAsUser"`
	RunAsGroup      *int64                       `json:"runAsGroup"`
	DrainDelay      *metav1.Duration             `json:"drainDelay"`
	DrainToken      string                       `json:"drainToken"`
	// ScrapeAnnotations is --sidecar-scrape-annotations.
	ScrapeAnnotations bool `json:"scrapeAnnotations"`
}

// defaultCaseParams are the Params of every golden case unless its
// <case>.params.yaml says otherwise: a 256Mi L1 (448Mi derived memory),
// default ports, no control plane, no secrets, a fixed drain token (the
// webhook makes a random one per pod).
func defaultCaseParams() caseParams {
	return caseParams{
		DrainToken:    "golden-drain-token",
		InitialConfig: `{"l1":{"maxSize":"256Mi"},"tier":"pages"}`,
		ConfigHash:    "9f86d081884c7d65",
		L1MaxSize:     resource.MustParse("256Mi"),
		Image:         "ghcr.io/tiercache/sidecar:v0.0.0-test",
	}
}

func (c caseParams) params(pod *corev1.Pod) Params {
	tier := c.Tier
	if tier == "" {
		tier = pod.Annotations[AnnotationTier]
	}
	var bodies int64
	if c.BodyStoreSize != nil {
		bodies = c.BodyStoreSize.Value()
	}
	var drain *time.Duration
	if c.DrainDelay != nil {
		drain = &c.DrainDelay.Duration
	}
	return Params{
		RunAsUser:         c.RunAsUser,
		RunAsGroup:        c.RunAsGroup,
		DrainDelay:        drain,
		DrainToken:        c.DrainToken,
		BodyStoreSize:     bodies,
		BodyStoreMedium:   c.BodyStoreMedium,
		Tier:              tier,
		InitialConfig:     []byte(c.InitialConfig),
		ConfigHash:        c.ConfigHash,
		L1MaxSize:         c.L1MaxSize.Value(),
		Image:             c.Image,
		ImagePullPolicy:   c.ImagePullPolicy,
		Resources:         c.Resources,
		Port:              c.Port,
		AdminPort:         c.AdminPort,
		ControlPlane:      c.ControlPlane,
		ControlPlaneCA:    []byte(c.ControlPlaneCA),
		TokenAudience:     c.TokenAudience,
		Secrets:           c.Secrets,
		ScrapeAnnotations: c.ScrapeAnnotations,
	}
}

// goldenCases returns the case names found in testdata.
func goldenCases(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".params.yaml") {
			cases = append(cases, strings.TrimSuffix(filepath.Base(f), ".yaml"))
		}
	}
	if len(cases) == 0 {
		t.Fatal("no golden cases in testdata")
	}
	return cases
}

func readPod(t testing.TB, path string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &pod
}

func caseParamsFor(t testing.TB, name string, pod *corev1.Pod) Params {
	t.Helper()
	c := defaultCaseParams()
	data, err := os.ReadFile(filepath.Join("testdata", name+".params.yaml"))
	switch {
	case os.IsNotExist(err):
	case err != nil:
		t.Fatal(err)
	default:
		// Decoding into the defaults overwrites only the fields present.
		if err := yaml.UnmarshalStrict(data, &c); err != nil {
			t.Fatalf("%s.params.yaml: %v", name, err)
		}
	}
	return c.params(pod)
}

func marshalPod(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	out, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func lines(b []byte) []string { return strings.Split(string(b), "\n") }

func TestInjectGolden(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			in := filepath.Join("testdata", name+".yaml")
			pod := readPod(t, in)
			alreadyInjected := injected(pod)
			before := marshalPod(t, pod)

			if err := Inject(pod, caseParamsFor(t, name, pod)); err != nil {
				t.Fatalf("Inject: %v", err)
			}
			got := marshalPod(t, pod)
			if alreadyInjected && !bytes.Equal(got, before) {
				t.Errorf("injecting an injected pod changed it (-before +after):\n%s", diff.Diff(lines(before), lines(got)))
			}

			golden := in + ".injected"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs (-want +got); run go test -update if the change is intended:\n%s",
					golden, diff.Diff(lines(want), lines(got)))
			}
		})
	}
}

// Every golden output, injected again, must come back unchanged.
func TestReinjectIsNoOp(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			pod := readPod(t, filepath.Join("testdata", name+".yaml.injected"))
			if ok, reason := InjectRequired(pod, "", nil); ok {
				t.Errorf("InjectRequired on an injected pod = true (%s)", reason)
			}
			want := pod.DeepCopy()
			if err := Inject(pod, caseParamsFor(t, name, pod)); err != nil {
				t.Fatalf("Inject: %v", err)
			}
			if !reflect.DeepEqual(pod, want) {
				t.Errorf("re-injection changed the pod (-want +got):\n%s",
					diff.Diff(lines(marshalPod(t, want)), lines(marshalPod(t, pod))))
			}
		})
	}
}
