package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/test/testnode"
)

// errInterrupted: the demo stopped on SIGINT or SIGTERM.
var errInterrupted = errors.New("interrupted")

// config is the command line.
type config struct {
	images      string // make image's output directory
	version     string // the images' tag (make image's VERSION)
	chart       string
	plugin      string // kubectl-tiercache
	helm        string
	redisServer string // hack/ensure-redis.sh's paths
	redisCLI    string
	oneshot     bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("democluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.images, "images", "bin/image", "the directory `make image` wrote the archives to")
	fs.StringVar(&c.version, "version", "", "the images' tag, make image's VERSION (required)")
	fs.StringVar(&c.chart, "chart", "charts/tiercache", "the chart's directory")
	fs.StringVar(&c.plugin, "plugin", "bin/kubectl-tiercache", "the kubectl plugin (make build)")
	fs.StringVar(&c.helm, "helm", os.Getenv("HELM"), "helm (hack/k8s-tools.sh env: HELM)")
	fs.StringVar(&c.redisServer, "redis-server", "", "redis-server, as hack/ensure-redis.sh prints it (required)")
	fs.StringVar(&c.redisCLI, "redis-cli", "", "redis-cli, as hack/ensure-redis.sh cli prints it (required)")
	fs.BoolVar(&c.oneshot, "oneshot", false, "tear down after the showcase; exit 1 unless it showed MISS, HIT, then MISS")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for flagName, v := range map[string]string{"-version": c.version, "-helm": c.helm, "-redis-server": c.redisServer, "-redis-cli": c.redisCLI} {
		if v == "" {
			return c, fmt.Errorf("%s: required", flagName)
		}
	}
	// Absolute: commands that enter the node's mount namespace start in
	// its root directory.
	for flagName, p := range map[string]*string{"-images": &c.images, "-chart": &c.chart, "-plugin": &c.plugin, "-helm": &c.helm} {
		if _, err := os.Stat(*p); err != nil {
			return c, fmt.Errorf("%s: %w", flagName, err)
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return c, fmt.Errorf("%s: %w", flagName, err)
		}
		*p = abs
	}
	return c, nil
}

// demo is one run: the node, the demo's own files and what the
// showcase saw.
type demo struct {
	cfg     config
	out     io.Writer
	node    *testnode.Node
	kubectl string
	dir     string // manifests, the Redis image, helm's home
	svcURL  string // the demo Service's ClusterIP URL
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	d := &demo{cfg: cfg, out: stdout, kubectl: os.Getenv("TIERCACHE_NODE_KUBECTL")}
	// Named by the pid, as the node's work directory is, so that
	// hack/demo-cluster.sh can check that nothing of this run is left.
	d.dir = filepath.Join(os.TempDir(), "tiercache-demo-cluster-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(d.dir)
	// kubectl finds the plugin on PATH.
	os.Setenv("PATH", filepath.Dir(cfg.plugin)+string(os.PathListSeparator)+os.Getenv("PATH"))

	d.say("Starting a single-node Kubernetes cluster in a network namespace of its own")
	start := time.Now()
	d.node, err = testnode.Up(ctx, testnode.Options{Logf: func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }})
	if err != nil {
		return d.stopped(ctx, err)
	}
	defer func() {
		d.say("Tearing the cluster down")
		if terr := d.node.Teardown(); terr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", terr))
		} else {
			fmt.Fprintln(d.out, "everything the cluster made is gone.")
		}
	}()
	fmt.Fprintf(d.out, "node Ready in %.0fs (logs: %s)\n", time.Since(start).Seconds(), d.node.LogDir())
	for _, phase := range []func(context.Context) error{d.loadImages, d.installChart, d.applyTier, d.deployApp} {
		if err := phase(ctx); err != nil {
			return d.stopped(ctx, err)
		}
	}
	failures := d.showcase(ctx)
	if !d.status(ctx) {
		failures++
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	if cfg.oneshot {
		if failures > 0 {
			return fmt.Errorf("demo-cluster smoke test FAILED: %d of the steps above went wrong (want MISS, HIT, a purge, MISS through the Service, and the tier's status)", failures)
		}
		fmt.Fprintln(d.out, "demo-cluster smoke test passed")
		return nil
	}
	d.tryIt()
	fmt.Fprintln(d.out, "\nThe cluster keeps running. Press Ctrl-C to tear it down.")
	<-ctx.Done()
	return errInterrupted
}

// stopped turns a phase's error into errInterrupted when a signal caused it.
func (d *demo) stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

func (d *demo) say(format string, a ...any) {
	fmt.Fprintf(d.out, "\n== "+format+"\n", a...)
}

// exec runs a command inside the node's namespaces, with its kubeconfig,
// after printing it as the user would type it (display).
func (d *demo) exec(ctx context.Context, display string, args ...string) (string, error) {
	if display != "" {
		fmt.Fprintln(d.out, "$ "+display)
	}
	out, err := d.node.Exec(ctx, args...)
	return string(out), err
}

func (d *demo) kubectlDo(ctx context.Context, args ...string) (string, error) {
	return d.exec(ctx, "kubectl "+strings.Join(args, " "), append([]string{d.kubectl}, args...)...)
}

// loadImages imports make image's archives and the Redis image into the
// node's containerd.
func (d *demo) loadImages(ctx context.Context) error {
	d.say("Loading the images into the node's containerd (no registry is involved)")
	redis, err := buildRedisImage(ctx, d.cfg.redisServer, d.cfg.redisCLI, d.dir)
	if err != nil {
		return fmt.Errorf("the Redis image: %w", err)
	}
	arch := "linux-" + runtime.GOARCH
	for _, a := range []string{
		filepath.Join(d.cfg.images, "tiercache-"+d.cfg.version+"-"+arch+".oci.tar"),
		filepath.Join(d.cfg.images, "demo-origin-"+d.cfg.version+"-"+arch+".oci.tar"),
		redis,
	} {
		if err := d.node.ImportImage(ctx, a); err != nil {
			return fmt.Errorf("importing %s: %w (run make image VERSION=%s)", a, err, d.cfg.version)
		}
		fmt.Fprintln(d.out, "loaded", a)
	}
	return nil
}

func (d *demo) installChart(ctx context.Context) error {
	d.say("Installing the chart (operator, CRD, webhooks, bundled Redis)")
	args := helmArgs(d.cfg.chart, d.cfg.version)
	helmHome := filepath.Join(d.dir, "helm")
	env := []string{"env", "HELM_CACHE_HOME=" + helmHome, "HELM_CONFIG_HOME=" + helmHome, "HELM_DATA_HOME=" + helmHome, d.cfg.helm}
	out, err := d.exec(ctx, "helm "+strings.Join(args, " "), append(env, args...)...)
	if err != nil {
		return err
	}
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "STATUS:") {
			fmt.Fprint(d.out, line)
		}
	}
	return nil
}

// applyTier applies the CacheTier once the validating webhook answers
// (helm --wait returns when the operator is Ready; the API server may
// reach it through kube-proxy's rules a moment later).
func (d *demo) applyTier(ctx context.Context) error {
	d.say("Declaring a cache tier")
	f := filepath.Join(d.dir, "tier.yaml")
	if err := os.WriteFile(f, []byte(tierManifest()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(d.out, indent(tierManifest()))
	if _, err := d.kubectlDo(ctx, "create", "namespace", appNS); err != nil {
		return err
	}
	err := poll(ctx, 2*time.Minute, "the CacheTier admitted", func() error {
		_, err := d.node.Exec(ctx, d.kubectl, "apply", "--dry-run=server", "-f", f)
		return err
	})
	if err != nil {
		return err
	}
	out, err := d.kubectlDo(ctx, "apply", "-f", f)
	fmt.Fprint(d.out, out)
	return err
}

// deployApp deploys the demo origin annotated for the tier, waits for its
// pods and for the tier to be Ready, and finds the Service's address.
func (d *demo) deployApp(ctx context.Context) error {
	d.say("Deploying the demo origin, annotated tiercache.io/tier: %s, behind a Service", tierName)
	image := "ghcr.io/tiercache/demo-origin:" + d.cfg.version
	f := filepath.Join(d.dir, "app.yaml")
	if err := os.WriteFile(f, []byte(appManifest(image)), 0o644); err != nil {
		return err
	}
	out, err := d.kubectlDo(ctx, "apply", "-f", f)
	fmt.Fprint(d.out, out)
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"rollout", "status", "deployment/" + appName, "-n", appNS, "--timeout", "3m"},
		{"wait", "--for=condition=Ready", "cachetier/" + tierName, "-n", appNS, "--timeout", "2m"},
		{"get", "pods", "-n", appNS, "-o", "wide"},
		{"get", "cachetier", "-n", appNS},
	} {
		out, err := d.kubectlDo(ctx, args...)
		fmt.Fprint(d.out, out)
		if err != nil {
			return err
		}
	}
	svc, err := d.node.Client().CoreV1().Services(appNS).Get(ctx, appName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.svcURL = "http://" + svc.Spec.ClusterIP
	// kube-proxy's rules may lag the endpoints a moment.
	return poll(ctx, time.Minute, "the Service answering at "+d.svcURL, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.svcURL+"/", nil)
		if err != nil {
			return err
		}
		resp, err := d.node.HTTPClient().Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
}

// poll calls check every 500 ms until it succeeds, for at most limit.
func poll(ctx context.Context, limit time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up after %v: %w", what, limit, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString("    " + line)
	}
	return b.String()
}
