package chart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current chart")

const (
	// The release every test renders or installs, as the docs install it.
	releaseName = "tiercache"
	releaseNS   = "tiercache-system"
	// cmdTimeout bounds every helm or make run.
	cmdTimeout = 3 * time.Minute
)

// requireTools reports whether a missing tool fails the test instead of
// skipping it (make test sets TIERCACHE_REQUIRE_ENVTEST=1).
func requireTools() bool { return os.Getenv("TIERCACHE_REQUIRE_ENVTEST") != "" }

// needEnv returns $name, or skips (fails under make test) when it is empty.
func needEnv(t *testing.T, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		msg := name + " is not set: " + what + " (make test sets it; or `set -a; eval \"$(bash hack/k8s-tools.sh env)\"; set +a`)"
		if requireTools() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return v
}

// repoRoot is the module root (this package is internal/chart).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "charts", "tiercache") }

// valuesCase is one set of values the chart is tested with: the defaults
// (file "") or a file in testdata/values.
type valuesCase struct {
	name string
	file string
}

// valuesCases lists the defaults and every testdata/values/*.yaml, so a new
// values file is linted, rendered and golden-tested without code changes.
func valuesCases(t *testing.T) []valuesCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	cases := []valuesCase{{name: "default"}}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, valuesCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), file: abs})
	}
	return cases
}

// helmArgs adds -f file when the case has one.
func (c valuesCase) helmArgs(args ...string) []string {
	if c.file != "" {
		args = append(args, "-f", c.file)
	}
	return args
}

// runCmd runs name with args (bounded by cmdTimeout) in dir and returns
// stdout; a failure returns an error quoting stderr.
func runCmd(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return stdout.String(), &cmdError{cmd: name + " " + strings.Join(args, " "), err: err, stderr: stderr.String(), stdout: stdout.String()}
	}
	return stdout.String(), nil
}

type cmdError struct {
	cmd, stderr, stdout string
	err                 error
}

func (e *cmdError) Error() string {
	return e.cmd + ": " + e.err.Error() + "\nstderr:\n" + e.stderr + "\nstdout:\n" + e.stdout
}

func (e *cmdError) Unwrap() error { return e.err }

// helm runs $HELM with its config, cache and data in a temporary directory
// (no user repositories or plugins leak in) and no ambient kubeconfig.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := needEnv(t, "HELM", "the chart tests run helm")
	home := t.TempDir()
	env := []string{
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		"KUBECONFIG=" + filepath.Join(home, "no-kubeconfig"),
	}
	return runCmd(context.Background(), repoRoot(t), env, bin, args...)
}

// rendered caches `helm template` per values case: several tests read the
// same output.
var rendered struct {
	sync.Mutex
	out map[string]string
}

// render returns `helm template` of the chart for the case, as installed
// by the docs: release tiercache in namespace tiercache-system.
func render(t *testing.T, c valuesCase) string {
	t.Helper()
	rendered.Lock()
	defer rendered.Unlock()
	if out, ok := rendered.out[c.name]; ok {
		return out
	}
	out := helm(t, c.helmArgs("template", releaseName, chartDir(t), "--namespace", releaseNS)...)
	if rendered.out == nil {
		rendered.out = make(map[string]string)
	}
	rendered.out[c.name] = out
	return out
}

// object is one rendered document: its raw YAML and its generic form.
type object struct {
	raw []byte
	u   *unstructured.Unstructured
}

func (o object) String() string {
	return o.u.GetKind() + " " + o.u.GetNamespace() + "/" + o.u.GetName()
}

// decode unmarshals the object strictly into a Kubernetes type: a field the
// type does not have is an error.
func (o object) decode(t *testing.T, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.raw, into); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

// parseObjects splits a multi-document manifest into its objects.
func parseObjects(t *testing.T, manifest string) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, object{raw: doc, u: &unstructured.Unstructured{Object: m}})
	}
}

// find returns the object of that kind and name, or fails.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	o, ok := lookup(objs, kind, name)
	if !ok {
		var have []string
		for _, o := range objs {
			have = append(have, o.String())
		}
		t.Fatalf("no %s %q rendered; have:\n  %s", kind, name, strings.Join(have, "\n  "))
	}
	return o
}

func lookup(objs []object, kind, name string) (object, bool) {
	for _, o := range objs {
		if o.u.GetKind() == kind && o.u.GetName() == name {
			return o, true
		}
	}
	return object{}, false
}

// byKind returns the objects of a kind.
func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.u.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}
