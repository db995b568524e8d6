// Package e2e tests the whole path a user takes, with the built binaries
// and real components: helm installs the chart into a real API server
// (envtest's etcd and kube-apiserver), the operator binary runs as a local
// process with the chart's own arguments and the chart's RBAC (its
// ServiceAccount's identity), kubectl applies a CacheTier, a pod created
// through the API server comes back injected, and sidecar processes start
// from the injected container's own args and env in front of a real
// origin process, sharing a real redis-server.
//
// There is no kubelet: the test plays its part where it must (it resolves
// the container's env, projects the certificate Secret into the
// operator's cert directory and the pods' ServiceAccount tokens into test
// directories, and points the webhook registrations at the operator's
// loopback address) and rewrites listen and control-plane addresses to
// loopback and the token path to its test directory. Everything else is
// as installed: xDS over TLS with the self-managed certificate, sidecars
// authenticated by their tokens.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/test/testkube"
	"github.com/tiercache/tiercache/test/testredis"
)

const (
	releaseNS = "tiercache-system"
	appNS     = "shop"
)

// binaries are built once per test run into a temporary directory.
type binaries struct{ sidecar, operator, origin string }

func build(t *testing.T) binaries {
	t.Helper()
	dir := t.TempDir()
	b := binaries{
		sidecar:  filepath.Join(dir, "tiercache-sidecar"),
		operator: filepath.Join(dir, "tiercache-operator"),
		origin:   filepath.Join(dir, "demo-origin"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for out, pkg := range map[string]string{b.sidecar: "./cmd/sidecar", b.operator: "./cmd/operator", b.origin: "./tools/demo-origin"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, o)
		}
	}
	return b
}

func need(t *testing.T, vars ...string) {
	t.Helper()
	for _, v := range vars {
		if os.Getenv(v) == "" {
			if os.Getenv("TIERCACHE_REQUIRE_ENVTEST") != "" {
				t.Fatalf("%s is not set: run `make test` (hack/k8s-tools.sh env)", v)
			}
			t.Skipf("%s is not set (make test sets it)", v)
		}
	}
}

// run runs a command bounded by a minute and returns its output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// eventually retries f every 100 ms until it succeeds or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serviceHost is the Host every replica sees, as clients of a Service
// send it: the host is part of the cache key.
const serviceHost = "web.shop.svc"

// get fetches url with the Service's Host and returns the X-Cache header
// and body.
func get(url string) (string, string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", "", err
	}
	req.Host = serviceHost
	resp, err := c.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.Header.Get("X-Cache"), string(b), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp.Header.Get("X-Cache"), string(b), nil
}

// expectXCache requires the X-Cache header of url to start with want.
func expectXCache(t *testing.T, url, want string) {
	t.Helper()
	x, _, err := get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if !strings.HasPrefix(x, want) {
		t.Fatalf("GET %s: X-Cache %q, want %s", url, x, want)
	}
}

func TestEndToEnd(t *testing.T) {
	need(t, "KUBEBUILDER_ASSETS", "HELM", "KUBECTL")
	if runtime.GOOS != "linux" {
		t.Skip("the test processes are managed with Linux signals")
	}
	ctx := context.Background()
	bins := build(t)
	helm, kubectl := os.Getenv("HELM"), os.Getenv("KUBECTL")

	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{corev1.AddToScheme, authnv1.AddToScheme, appsv1.AddToScheme, admissionv1.AddToScheme, apiextv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	admin := testkube.Kubeconfig(t, env, testkube.Admin)

	// 1. helm install, as the README says. The chart's objects must be
	// accepted by the API server.
	run(t, helm, "install", "tiercache", "../charts/tiercache", "--namespace", releaseNS, "--create-namespace",
		"--kubeconfig", admin, "--wait=false", "--timeout", "2m")
	eventually(t, "the CRD is established", 30*time.Second, func() error {
		var crd apiextv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: "cachetiers.tiercache.io"}, &crd); err != nil {
			return err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", crd.Status.Conditions)
	})

	// 2. The operator binary with the installed Deployment's arguments and
	// the chart's RBAC: it authenticates as the chart's ServiceAccount.
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "tiercache-operator"}, &dep); err != nil {
		t.Fatal(err)
	}
	opSpec := dep.Spec.Template.Spec.Containers[0]
	if len(opSpec.Command) != 1 || filepath.Base(opSpec.Command[0]) != "tiercache-operator" {
		t.Fatalf("operator command %q", opSpec.Command)
	}
	webhookAddr, healthAddr, xdsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	certDir := t.TempDir()
	opArgs := rewriteArgs(t, opSpec.Args, map[string]string{
		"--metrics-bind-address":      "0",
		"--health-probe-bind-address": healthAddr,
		"--webhook-port":              portOf(webhookAddr),
		"--webhook-cert-dir":          certDir,
		"--xds-listen":                xdsAddr,
		// The certificate names localhost (below), not 127.0.0.1.
		"--control-plane-address": "localhost:" + portOf(xdsAddr),
	})
	// The token a kubelet would mount: the operator presents it to its
	// other replicas (--relay-peers).
	opToken, err := testkube.ServiceAccountToken(ctx, c, releaseNS, dep.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	opTokenFile := filepath.Join(t.TempDir(), "token")
	testkube.WriteToken(t, opTokenFile, opToken)
	opArgs = append(opArgs, "--webhook-host=127.0.0.1", "--webhook-cert-extra-dns-names=localhost", "--relay-token-file="+opTokenFile)
	opKubeconfig := testkube.Kubeconfig(t, env, testkube.ServiceAccount(releaseNS, dep.Spec.Template.Spec.ServiceAccountName))
	startOperator := func() *proc {
		return start(t, "operator", bins.operator, opArgs, []string{"KUBECONFIG=" + opKubeconfig, "POD_NAMESPACE=" + releaseNS})
	}
	op := startOperator()
	kctx, stopKubelet := context.WithCancel(ctx)
	kubeletDone := make(chan struct{})
	go func() {
		defer close(kubeletDone)
		testkube.ProjectSecret(kctx, c, client.ObjectKey{Namespace: releaseNS, Name: "tiercache-webhook-cert"}, certDir)
	}()
	t.Cleanup(func() { stopKubelet(); <-kubeletDone })
	eventually(t, "the webhooks point at the operator", 30*time.Second, func() error {
		// The operator patches caBundle meanwhile: retry on conflicts.
		return pointWebhooksAt(ctx, c, "https://localhost:"+portOf(webhookAddr))
	})
	eventually(t, "the operator is ready", 90*time.Second, func() error {
		if op.exited() {
			t.Fatalf("the operator exited: %v", op.err)
		}
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %s", resp.Status)
		}
		return nil
	})

	// 3. Redis, the origin, and a CacheTier applied with kubectl.
	redis := testredis.Start(t)
	originAddr := freeAddr(t)
	origin := start(t, "origin", bins.origin, []string{"--listen", originAddr}, nil)
	waitTCP(t, origin, originAddr, 30*time.Second)
	run(t, kubectl, "--kubeconfig", admin, "create", "namespace", appNS)
	// The controller-manager's part: the namespace's default
	// ServiceAccount, which the injected pods run as.
	run(t, kubectl, "--kubeconfig", admin, "create", "serviceaccount", "default", "--namespace", appNS)
	// The tier reaches Redis as an ACL user of its own, exactly as
	// docs/l2.md says to create it, with its password in a Secret that
	// opts in to being referenced.
	rc := goredis.NewClient(&goredis.Options{Addr: redis.Addr()})
	defer rc.Close()
	setACL := func(args ...string) {
		t.Helper()
		cmd := []any{"ACL", "SETUSER", tierUser}
		for _, a := range args {
			cmd = append(cmd, a)
		}
		if err := rc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s %q: %v", tierUser, args, err)
		}
	}
	setACL(strings.Fields(strings.ReplaceAll(documentedACL(t), "PASSWORD", "password-1"))...)
	run(t, kubectl, "--kubeconfig", admin, "create", "secret", "generic", "redis-auth", "--namespace", appNS, "--from-literal=password=password-1")
	run(t, kubectl, "--kubeconfig", admin, "label", "secret", "redis-auth", "--namespace", appNS, inject.LabelAllowReference+"=true")
	applyTier := func(helloBypass bool) {
		t.Helper()
		rules := ""
		if helloBypass {
			rules = "  rules:\n    - name: hello\n      match: {path: /hello}\n      bypass: true\n"
		}
		manifest := fmt.Sprintf(`apiVersion: tiercache.io/v1alpha1
kind: CacheTier
metadata: {name: web, namespace: %s}
spec:
  l1: {maxSize: 32Mi}
  l2:
    addresses: [%q]
    timeout: 2s
    username: %s
    passwordSecretRef: {name: redis-auth, key: password}
%s`, appNS, redis.Addr(), tierUser, rules)
		cmd := exec.Command(kubectl, "--kubeconfig", admin, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	// The webhook must answer before the apply: it validates tiers.
	eventually(t, "the CacheTier is admitted", 60*time.Second, func() error {
		cmd := exec.Command(kubectl, "--kubeconfig", admin, "apply", "--dry-run=server", "-f", "-")
		cmd.Stdin = strings.NewReader(fmt.Sprintf("apiVersion: tiercache.io/v1alpha1\nkind: CacheTier\nmetadata: {name: web, namespace: %s}\n", appNS))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	applyTier(true)
	eventually(t, "the tier is Ready", 60*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKey{Namespace: appNS, Name: "web"}, &tier); err != nil {
			return err
		}
		for _, cond := range tier.Status.Conditions {
			if cond.Type == v1alpha1.ConditionReady && cond.Status == metav1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("status %+v", tier.Status)
	})

	// 4. Two pods of a Deployment-like workload, created through the API
	// server and read back injected.
	sidecarURL := map[string]string{}
	adminURL := map[string]string{}
	secretsOf := map[string]string{} // pod → its projected secrets directory
	procs := map[string]*proc{}
	for _, name := range []string{"web-0", "web-1"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name, Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{inject.AnnotationTier: "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "example.test/web:1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(mustAtoi(t, portOf(originAddr)))}},
			}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			t.Fatal(err)
		}
		var sc *corev1.Container
		for i := range got.Spec.InitContainers {
			if got.Spec.InitContainers[i].Name == inject.ContainerName {
				sc = &got.Spec.InitContainers[i]
			}
		}
		if sc == nil {
			t.Fatalf("pod %s was not injected", name)
		}
		// 5. The sidecar process from the injected container's own args
		// and env; only addresses become loopback ones, and the
		// projected volumes it mounts (the xDS token; the tier's Secrets,
		// here the Redis password, the generated purge token and the
		// invalidation key) are played by testkube as the kubelet would,
		// each into a test directory.
		mounts := map[string]string{} // mount path in the pod → directory here
		for _, m := range sc.VolumeMounts {
			for _, v := range got.Spec.Volumes {
				if v.Name == m.Name && v.Projected != nil {
					mounts[m.MountPath] = t.TempDir()
					testkube.ProjectVolume(t.Context(), c, &got, v.Projected, mounts[m.MountPath])
				}
			}
		}
		tokenDir, secretsDir := mounts[inject.XDSTokenDir], mounts[inject.SecretsDir]
		tokenFile := filepath.Join(inject.XDSTokenDir, inject.XDSTokenFile)
		if b, err := os.ReadFile(filepath.Join(tokenDir, inject.XDSTokenFile)); tokenDir == "" || err != nil || len(b) == 0 || !contains(sc.Args, "--control-plane-token-file="+tokenFile) {
			t.Fatalf("pod %s: the projected xDS token: %v, args %q: want the xDS token at %s", name, err, sc.Args, tokenFile)
		}
		listen, adminAddr := freeAddr(t), freeAddr(t)
		for _, f := range []string{inject.FilePurgeToken, inject.FileInvalidationKey} {
			if b, err := os.ReadFile(filepath.Join(secretsDir, f)); err != nil || len(b) != 64 {
				t.Fatalf("pod %s: the projected %s from the generated Secret: %q, %v", name, f, b, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(secretsDir, inject.FileRedisPassword)); err != nil || string(b) != "password-1" {
			t.Fatalf("pod %s: the projected Redis password: %q, %v", name, b, err)
		}
		args := rewriteArgs(t, sc.Args, map[string]string{
			"--listen":                   listen,
			"--admin-listen":             adminAddr,
			"--control-plane":            "localhost:" + portOf(xdsAddr),
			"--control-plane-token-file": filepath.Join(tokenDir, inject.XDSTokenFile),
			"--state-dir":                t.TempDir(),
			"--secrets-dir":              secretsDir,
		})
		if !contains(args, "--upstream=http://127.0.0.1:"+portOf(originAddr)) {
			t.Fatalf("injected args %q do not front the app port", args)
		}
		envs, err := containerEnv(ctx, c, &got, sc)
		if err != nil {
			t.Fatal(err)
		}
		if !contains(args, "--drain-delay=5s") || !contains(args, "--shutdown-timeout=25s") {
			t.Fatalf("injected args %q lack the drain delay and shutdown timeout of a pod with the default grace period", args)
		}
		p := start(t, name, bins.sidecar, args, envs)
		procs[name] = p
		waitTCP(t, p, listen, 30*time.Second)
		sidecarURL[name], adminURL[name] = "http://"+listen, "http://"+adminAddr
		secretsOf[name] = secretsDir
	}
	a, b := sidecarURL["web-0"], sidecarURL["web-1"]
	eventually(t, "the tier's status counts both sidecars, on the current config, and is Ready", 90*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKey{Namespace: appNS, Name: "web"}, &tier); err != nil {
			return err
		}
		if tier.Status.ConnectedSidecars != 2 || tier.Status.InjectedPods != 2 {
			return fmt.Errorf("connectedSidecars %d, injectedPods %d", tier.Status.ConnectedSidecars, tier.Status.InjectedPods)
		}
		if sc := tier.Status.Sidecars; sc == nil || sc.Current != 2 || sc.Total != 2 {
			return fmt.Errorf("sidecars %+v, want both current", sc)
		}
		if r := meta.FindStatusCondition(tier.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue || r.Reason != v1alpha1.ReasonApplied {
			return fmt.Errorf("Ready %+v, want True (Applied)", r)
		}
		return nil
	})

	// 6. MISS then HIT.
	expectXCache(t, a+"/tagged/one", "MISS")
	expectXCache(t, a+"/tagged/one", "HIT")
	// 7. The other replica gets the entry from L2 (once the first one's
	// write, which is asynchronous, has landed).
	eventually(t, "the entry reaches Redis", 10*time.Second, func() error {
		keys, _, err := rc.Scan(ctx, 0, "tc:"+appNS+"/web:e:*", 100).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return fmt.Errorf("no entry under tc:%s/web:e:", appNS)
		}
		return nil
	})
	var seen []string
	eventually(t, "an L2 hit on the second replica", 10*time.Second, func() error {
		x, _, err := get(b + "/tagged/one")
		if err != nil {
			return err
		}
		seen = append(seen, x)
		if !strings.HasPrefix(x, "HIT") || !strings.Contains(x, "l2") {
			return fmt.Errorf("X-Cache %q, want an L2 hit (answers so far: %q)", x, seen)
		}
		return nil
	})
	// 8. A CacheTier edit changes a rule live.
	expectXCache(t, a+"/hello", "BYPASS")
	applyTier(false)
	eventually(t, "the edited rule is live", 30*time.Second, func() error {
		_, _, _ = get(a + "/hello")
		x, _, err := get(a + "/hello")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(x, "HIT") {
			return fmt.Errorf("X-Cache %q, want HIT once the bypass rule is gone", x)
		}
		return nil
	})
	// 9. A purge through one replica removes the entry from both. It
	// needs the tier's purge token (the one the operator generated): a
	// client without it, wherever it comes from, is refused.
	expectXCache(t, b+"/tagged/one", "HIT")
	token, err := os.ReadFile(filepath.Join(secretsOf["web-0"], inject.FilePurgeToken))
	if err != nil {
		t.Fatal(err)
	}
	if status := purgeStatus(t, adminURL["web-0"], "", `{"urls":["/tagged/one"]}`); status != http.StatusUnauthorized {
		t.Fatalf("a purge without the token: %d, want 401", status)
	}
	expectXCache(t, b+"/tagged/one", "HIT")
	purge(t, adminURL["web-0"], string(token), `{"urls":["/tagged/one"]}`)
	eventually(t, "the purge reaches the other replica", 5*time.Second, func() error {
		x, _, err := get(b + "/tagged/one")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(x, "MISS") {
			return fmt.Errorf("X-Cache %q on the other replica after the purge", x)
		}
		return nil
	})
	// 10. The Redis password and the purge token are rotated while both
	// sidecars serve: no client sees an error.
	load := startLoad(t, []string{a, b})
	setACL(">password-2") // the user takes both passwords during the change
	updateSecret(t, c, "redis-auth", "password", "password-2")
	setACL("<password-1")
	if err := rc.Do(ctx, "CLIENT", "KILL", "USER", tierUser).Err(); err != nil {
		t.Fatalf("CLIENT KILL USER: %v", err)
	}
	// Both sidecars reach L2 again, as the user with its new password
	// only: a fill through one is an L2 hit through the other.
	attempt := 0
	eventually(t, "L2 works with the new password", 60*time.Second, func() error {
		attempt++
		u := fmt.Sprintf("/tagged/after-rotation-%d", attempt)
		if x, _, err := get(a + u); err != nil || !strings.HasPrefix(x, "MISS") {
			return fmt.Errorf("fill %s: %q %v", u, x, err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			x, _, err := get(b + u)
			if err == nil && strings.HasPrefix(x, "HIT") && strings.Contains(x, "l2") {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s on the other replica: %q %v", u, x, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	newToken := strings.Repeat("ab", 32)
	updateSecret(t, c, inject.GeneratedSecretName("web"), inject.KeyPurgeToken, newToken)
	for name, u := range adminURL {
		eventually(t, name+" takes the new purge token", 30*time.Second, func() error {
			if st := purgeStatus(t, u, newToken, `{"urls":["/tagged/rotated"]}`); st != http.StatusOK {
				return fmt.Errorf("the new token: %d", st)
			}
			return nil
		})
		if st := purgeStatus(t, u, string(token), `{"urls":["/tagged/rotated"]}`); st != http.StatusUnauthorized {
			t.Fatalf("%s: the old purge token after the rotation: %d, want 401", name, st)
		}
	}
	if n, errs := load.stop(); errs != nil || n < 20 {
		t.Fatalf("during the rotations: %d requests, errors %v", n, errs)
	}

	// 11. Redis killed: still serving, from L1 and the origin.
	redis.Kill()
	for i := range 20 {
		if _, _, err := get(a + fmt.Sprintf("/tagged/after-redis-%d", i%4)); err != nil {
			t.Fatalf("with Redis down: %v", err)
		}
	}
	expectXCache(t, a+"/hello", "HIT")
	// 12. Operator killed: still serving with the last config (the
	// /hello rule edit stays in effect).
	op.kill()
	for _, u := range []string{a, b} {
		_, _, _ = get(u + "/hello")
		expectXCache(t, u+"/hello", "HIT")
	}
	for name, p := range map[string]string{"web-0": adminURL["web-0"], "web-1": adminURL["web-1"]} {
		resp, err := http.Get(p + "/readyz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s not ready without the operator: %v %v", name, err, resp)
		}
		resp.Body.Close()
	}

	// 13. A pod's shutdown, with the injected drain delay: SIGTERM to
	// web-1's sidecar, as the kubelet sends it once the app has exited.
	// It reports not ready at once and keeps serving from its cache while
	// endpoints would update, then exits by itself.
	sc := procs["web-1"]
	if err := sc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web-1 reports not ready after SIGTERM", 4*time.Second, func() error {
		resp, err := http.Get(adminURL["web-1"] + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d, want 503", resp.StatusCode)
		}
		return nil
	})
	expectXCache(t, b+"/hello", "HIT")
	select {
	case <-sc.done:
	case <-time.After(5*time.Second + 25*time.Second + 5*time.Second):
		t.Fatal("web-1's sidecar did not exit within its drain delay and shutdown timeout")
	}
	if sc.err != nil {
		t.Logf("web-1's sidecar exited with %v (Redis and the operator are down)", sc.err)
	}
}

func purge(t *testing.T, adminURL, token, body string) {
	t.Helper()
	resp, err := purgeRequest(adminURL, token, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct{ Purged int }
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusOK || res.Purged < 1 {
		t.Fatalf("purge: %s %+v %v", resp.Status, res, err)
	}
}

// pointWebhooksAt replaces the Service in both webhook registrations by a
// URL (the operator runs on loopback, not behind the Service), keeping
// whatever caBundle the operator patched in.
func pointWebhooksAt(ctx context.Context, c client.Client, base string) error {
	toURL := func(cc *admissionv1.WebhookClientConfig) {
		if cc.Service != nil {
			u := base + *cc.Service.Path
			cc.Service, cc.URL = nil, &u
		}
	}
	var m admissionv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "tiercache-inject"}, &m); err != nil {
		return err
	}
	for i := range m.Webhooks {
		toURL(&m.Webhooks[i].ClientConfig)
	}
	if err := c.Update(ctx, &m); err != nil {
		return err
	}
	var v admissionv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "tiercache-validate"}, &v); err != nil {
		return err
	}
	for i := range v.Webhooks {
		toURL(&v.Webhooks[i].ClientConfig)
	}
	return c.Update(ctx, &v)
}

func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// tierUser is the tier's Redis ACL user.
const tierUser = "tc-shop-web"

// documentedACL returns the ACL SETUSER arguments docs/l2.md gives for
// the shop/web tier, with PASSWORD for the password: the e2e runs the
// documented line, so the doc cannot drift from what works.
func documentedACL(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/l2.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "ACL SETUSER "+tierUser+" "); ok {
			return rest
		}
	}
	t.Fatalf("docs/l2.md has no line starting %q", "ACL SETUSER "+tierUser)
	return ""
}

func purgeRequest(adminURL, token, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, adminURL+"/purge", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// purgeStatus sends a purge and returns its status.
func purgeStatus(t *testing.T, adminURL, token, body string) int {
	t.Helper()
	resp, err := purgeRequest(adminURL, token, body)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// updateSecret sets one key of a Secret of the app namespace, as
// `kubectl edit` would.
func updateSecret(t *testing.T, c client.Client, name, key, value string) {
	t.Helper()
	eventually(t, "updating Secret "+name, 10*time.Second, func() error {
		var s corev1.Secret
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: appNS, Name: name}, &s); err != nil {
			return err
		}
		s.Data[key] = []byte(value)
		return c.Update(context.Background(), &s)
	})
}

// load sends requests to the sidecars one after another until stopped,
// and records every error a client would see (no answer, or a 5xx).
type load struct {
	stopc chan struct{}
	done  chan struct{}
	n     int
	errs  []error
}

func startLoad(t *testing.T, bases []string) *load {
	l := &load{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		// Bounded in count and time, whatever the test does.
		deadline := time.Now().Add(3 * time.Minute)
		for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
			select {
			case <-l.stopc:
				return
			default:
			}
			u := fmt.Sprintf("%s/tagged/load-%d", bases[i%len(bases)], i%8)
			resp, err := http.Get(u)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode >= 500 {
					err = fmt.Errorf("%s: %s", u, resp.Status)
				}
			}
			l.n++
			if err != nil && len(l.errs) < 10 {
				l.errs = append(l.errs, err)
			}
		}
	}()
	t.Cleanup(func() { l.stop() })
	return l
}

// stop ends the load and returns the requests sent and the errors seen.
func (l *load) stop() (int, []error) {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	<-l.done
	return l.n, l.errs
}
