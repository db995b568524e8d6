package pods

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/test/testnode"
)

// step is one step of the user's path. Steps run in order on one node; a
// failed step ends the run (the later ones build on it).
type step struct {
	name string
	run  func(*testing.T)
	// always: setup the later steps need, run whatever E2E_RUN picks.
	always bool
}

// TestUserPath walks the user's path on a real node, step by step.
func TestUserPath(t *testing.T) {
	im, err := imagesFromEnv()
	if err != nil {
		skipOrFail(t, err.Error())
	}
	helm, kubectl := os.Getenv("HELM"), os.Getenv("TIERCACHE_NODE_KUBECTL")
	if helm == "" || kubectl == "" {
		skipOrFail(t, "HELM or TIERCACHE_NODE_KUBECTL is not set (make test-node sets them from hack/k8s-tools.sh and hack/node-tools.sh)")
	}
	var pick *regexp.Regexp
	if r := os.Getenv("E2E_RUN"); r != "" {
		pick = regexp.MustCompile(r)
	}
	start := time.Now()
	n := testnode.Start(t)
	c, err := client.New(n.RESTConfig(), client.Options{Scheme: newScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, n: n, c: c, im: im, helm: helm, kubectl: kubectl, home: t.TempDir()}
	s.prepare(t)
	t.Logf("node up and images imported in %.1fs", time.Since(start).Seconds())

	for _, st := range []step{
		{"1-install", s.install, true},
		{"2-app", s.app, true},
		{"3-plugin", s.pluginCommands, false},
		{"4-live-config", s.liveConfig, false},
		{"5-zero-trust", s.zeroTrust, false},
		{"6-faults-under-load", s.faults, false},
		{"7-body-store-and-rotation", s.bodyStoreAndRotation, false},
		{"8-mistakes", s.mistakes, false},
		{"9-reinstall", s.reinstall, false},
	} {
		if !st.always && pick != nil && !pick.MatchString(st.name) {
			continue
		}
		began := time.Now()
		ok := t.Run(st.name, st.run)
		t.Logf("step %s: %.1fs", st.name, time.Since(began).Seconds())
		if !ok {
			s.dumpLogs(t)
			t.Fatalf("step %s failed; the later steps build on it", st.name)
		}
	}
	t.Logf("the user's path: %.1fs in all", time.Since(start).Seconds())
}

// prepare builds the plugin and the Redis image and imports the images.
func (s *suite) prepare(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	s.plugin = t.TempDir()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(s.plugin, "kubectl-tiercache"), "../../cmd/kubectl-tiercache")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build kubectl-tiercache: %v\n%s", err, out)
	}
	redis := s.buildRedisImage(t)
	for _, a := range []string{s.im.product, s.im.demo, redis} {
		if err := s.n.ImportImage(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
}

// helmInstall installs the chart as the README says, with the images
// built here and the bundled Redis.
func (s *suite) helmInstall(t *testing.T) {
	t.Helper()
	chart, err := filepath.Abs(chartDir)
	must(t, err)
	repo, tag, _ := strings.Cut(s.im.productRef, ":")
	redisRepo, redisTag, _ := strings.Cut(redisImage, ":")
	out, err := s.exec(t.Context(), 4*time.Minute, s.helm, "install", release, chart,
		"--namespace", releaseNS, "--create-namespace",
		// --set-string: a tag of digits alone (a short commit, as make
		// image names a clean checkout's) is a number to --set.
		"--set", "image.repository="+repo, "--set-string", "image.tag="+tag,
		"--set", "redis.bundled.enabled=true",
		"--set", "redis.bundled.image.repository="+redisRepo, "--set-string", "redis.bundled.image.tag="+redisTag,
		"--wait", "--timeout", "3m")
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
}

// install: helm install; the operator Ready, the webhooks serving with
// the chart's own (self-managed) certificate, which the caBundle names.
func (s *suite) install(t *testing.T) {
	began := time.Now()
	s.helmInstall(t)
	t.Logf("helm install --wait: %.1fs", time.Since(began).Seconds())
	ctx := t.Context()
	var dep appsv1.Deployment
	must(t, s.c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: release + "-operator"}, &dep))
	if dep.Status.ReadyReplicas != 2 {
		t.Fatalf("operator: %d ready replicas, want 2", dep.Status.ReadyReplicas)
	}
	var mwc admissionv1.MutatingWebhookConfiguration
	must(t, s.c.Get(ctx, client.ObjectKey{Name: release + "-inject"}, &mwc))
	for _, wh := range mwc.Webhooks {
		s.checkWebhookTLS(t, wh.Name, wh.ClientConfig)
	}
	var vwc admissionv1.ValidatingWebhookConfiguration
	must(t, s.c.Get(ctx, client.ObjectKey{Name: release + "-validate"}, &vwc))
	for _, wh := range vwc.Webhooks {
		s.checkWebhookTLS(t, wh.Name, wh.ClientConfig)
	}
	// The validating webhook answers the API server.
	s.kubectlOK(t, "create", "namespace", appNS)
	eventually(t, "a CacheTier passes admission (server dry run)", 30*time.Second, func() error {
		_, err := s.apply(t, s.tierManifest(""), "--dry-run=server")
		return err
	})
}

// checkWebhookTLS: the webhook's Service serves a certificate for its
// DNS name that chains to the caBundle in the registration.
func (s *suite) checkWebhookTLS(t *testing.T, name string, cc admissionv1.WebhookClientConfig) {
	t.Helper()
	if cc.Service == nil || len(cc.CABundle) == 0 {
		t.Fatalf("webhook %s: service %v, caBundle of %d bytes: want the Service and the operator's CA", name, cc.Service, len(cc.CABundle))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cc.CABundle) {
		t.Fatalf("webhook %s: caBundle holds no PEM certificate", name)
	}
	host := cc.Service.Name + "." + cc.Service.Namespace + ".svc"
	port := int32(443)
	if cc.Service.Port != nil {
		port = *cc.Service.Port
	}
	// kube-proxy may lag the endpoints a moment.
	eventually(t, "webhook "+name+" serving TLS", 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		raw, err := s.dial(ctx, "tcp", fmt.Sprintf("%s.%s:%d", host, testnode.ClusterDomain, port))
		if err != nil {
			return err
		}
		conn := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12})
		defer conn.Close()
		if err := conn.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("%s:%d: TLS with the registration's caBundle: %w", host, port, err)
		}
		return nil
	})
}

// tierManifest is the CacheTier (L2 on the bundled Redis, with the
// suite's l2 lines) with extra spec lines. L2 calls get 1s, not the
// default 50ms: on this 2-core machine under the e2e's load (6 pods, 6
// clients, load average about 10) a new pod's first L2 calls (a dial,
// a DNS lookup through CoreDNS) took longer than 50ms, and in about one
// run in two longer than 250ms, so a new pod fetched keys from its
// origin that were in L2.
func (s *suite) tierManifest(extra string) string {
	return fmt.Sprintf(`apiVersion: tiercache.io/v1alpha1
kind: CacheTier
metadata: {name: %s, namespace: %s}
spec:
  l1: {maxSize: 16Mi}
  l2:
    addresses: ["%s-redis.%s.svc:6379"]
    timeout: 1s
%s%s`, tierName, appNS, release, releaseNS, s.l2Extra, extra)
}

// appManifest is the app: the demo origin, 3 replicas, annotated, with
// its own probes on its named port, and its Service by port name.
func (s *suite) appManifest(replicas int, extraAnnotations string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata:
      labels: {app: %[1]s}
      annotations:
        tiercache.io/tier: %[4]s
%[6]s
    spec:
      containers:
      - name: app
        image: %[5]s
        imagePullPolicy: IfNotPresent
        args: ["--listen=:8080"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /hello, port: http}, periodSeconds: 1}
        livenessProbe: {httpGet: {path: /hello, port: http}, periodSeconds: 2}
        resources: {requests: {cpu: 10m, memory: 16Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {app: %[1]s}
  ports: [{name: http, port: 80, targetPort: http}]
`, appName, appNS, replicas, tierName, s.im.demoRef, extraAnnotations)
}

// app: the bundled Redis, a CacheTier, a 3-replica annotated app; every
// pod injected with the native sidecar started before the app, the
// app's probes passing, MISS then HIT through the Service by its DNS
// name, L2 across pods, and `kubectl get ct` counting the pods.
func (s *suite) app(t *testing.T) {
	s.applyOK(t, s.tierManifest(""))
	// A new tier without pods counts 0, not blank.
	s.waitColumns(t, map[string]string{"PODS": "0", "CURRENT": "0", "CONNECTED": "0"}, 30*time.Second)
	s.applyOK(t, s.appManifest(3, ""))
	began := time.Now()
	pods := s.waitAppReady(t, 3, 3*time.Minute)
	t.Logf("3 injected app pods Ready %.1fs after the apply", time.Since(began).Seconds())
	for _, p := range pods {
		checkInjected(t, p)
	}

	var svc corev1.Service
	must(t, s.c.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: appName}, &svc))
	s.svcIP = svc.Spec.ClusterIP
	addrs, err := s.n.Resolver().LookupHost(t.Context(), serviceHost)
	if err != nil || !slices.Contains(addrs, s.svcIP) {
		t.Fatalf("%s resolves to %v (%v), want the ClusterIP %s", serviceHost, addrs, err, s.svcIP)
	}
	// One keep-alive connection stays on one pod (kube-proxy picks per
	// connection): MISS, then HIT from that pod's L1.
	kc := s.httpClient(true)
	url := "http://" + serviceHost + "/tagged/first"
	var a answer
	eventually(t, "the Service answers by its DNS name", 30*time.Second, func() error {
		a, err = get(t.Context(), kc, url)
		return err
	})
	if a.xcache != "MISS" {
		t.Fatalf("first GET %s through the Service: X-Cache %q, want MISS", url, a.xcache)
	}
	if a, err = get(t.Context(), kc, url); err != nil || a.xcache != "HIT; layer=l1" {
		t.Fatalf("second GET %s on the same connection: %q %v, want HIT; layer=l1", url, a.xcache, err)
	}

	// A fill through one pod is an L2 hit on another.
	nc := s.httpClient(false)
	u := "/tagged/across-pods"
	if a, err := get(t.Context(), nc, podURL(pods[0], 15180)+u); err != nil || a.xcache != "MISS" {
		t.Fatalf("fill through %s: %q %v", pods[0].Name, a.xcache, err)
	}
	eventually(t, "an L2 hit on "+pods[1].Name, 10*time.Second, func() error {
		a, err := get(t.Context(), nc, podURL(pods[1], 15180)+u)
		if err != nil {
			return err
		}
		if a.xcache != "HIT; layer=l2" {
			return fmt.Errorf("X-Cache %q", a.xcache)
		}
		return nil
	})

	s.waitColumns(t, map[string]string{"READY": "True", "PODS": "3", "CURRENT": "3", "CONNECTED": "3", "REJECTED": "0"}, time.Minute)
	for _, p := range s.appPods(t) {
		checkAppHealthy(t, p)
	}
}

// waitColumns waits until `kubectl get ct -o wide` shows want.
func (s *suite) waitColumns(t *testing.T, want map[string]string, limit time.Duration) {
	t.Helper()
	eventually(t, fmt.Sprintf("kubectl get ct shows %v", want), limit, func() error {
		cols, err := s.getColumns(t, appNS, tierName)
		if err != nil {
			return err
		}
		for k, v := range want {
			if cols[k] != v {
				return fmt.Errorf("columns %v", cols)
			}
		}
		return nil
	})
}

// checkInjected: the native sidecar (an init container that restarts
// always), started and ready before the app started; the app's probes
// moved from the port name it lost to its number.
func checkInjected(t *testing.T, p corev1.Pod) {
	t.Helper()
	if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != inject.ContainerName {
		t.Fatalf("pod %s: init containers %v, want the sidecar %q first", p.Name, p.Spec.InitContainers, inject.ContainerName)
	}
	sc := p.Spec.InitContainers[0]
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("pod %s: the sidecar's restartPolicy %v, want Always (a native sidecar)", p.Name, sc.RestartPolicy)
	}
	app := p.Spec.Containers[0]
	for what, pr := range map[string]*corev1.Probe{"liveness": app.LivenessProbe, "readiness": app.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Port.IntValue() != 8080 {
			t.Fatalf("pod %s: the app's %s probe %+v, want it on port 8080 (its name went to the sidecar)", p.Name, what, pr)
		}
	}
	if len(p.Status.InitContainerStatuses) == 0 || len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s: no container statuses", p.Name)
	}
	ss, as := p.Status.InitContainerStatuses[0], p.Status.ContainerStatuses[0]
	if ss.State.Running == nil || as.State.Running == nil || ss.Started == nil || !*ss.Started {
		t.Fatalf("pod %s: %s", p.Name, podState(&p))
	}
	if as.State.Running.StartedAt.Before(&ss.State.Running.StartedAt) {
		t.Fatalf("pod %s: the app started at %v, before its sidecar (%v)", p.Name, as.State.Running.StartedAt, ss.State.Running.StartedAt)
	}
}

// checkAppHealthy: the app's own probes pass (Ready, never restarted by
// its liveness probe) and so do the sidecar's.
func checkAppHealthy(t *testing.T, p corev1.Pod) {
	t.Helper()
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if !cs.Ready || cs.RestartCount != 0 {
			t.Fatalf("pod %s: container %s ready=%v restarts=%d: %s", p.Name, cs.Name, cs.Ready, cs.RestartCount, podState(&p))
		}
	}
}

// pluginCommands: kubectl tiercache status, purge (over a real
// port-forward) and explain; a purge reaches every pod.
func (s *suite) pluginCommands(t *testing.T) {
	pods := s.appPods(t)
	out := s.kubectlOK(t, "tiercache", "status", tierName, "-n", appNS)
	for _, p := range pods {
		if !strings.Contains(out, p.Name) {
			t.Fatalf("kubectl tiercache status does not list pod %s:\n%s", p.Name, out)
		}
	}
	t.Logf("kubectl tiercache status:\n%s", out)

	// Every pod holds the same stored copy (filled once, the others
	// from L2); after the purge none serves it: the first pod purged
	// its L1 and Redis, the invalidation channel every other L1. (A
	// pod's miss fills again, so "a different copy", not "a MISS".)
	nc := s.httpClient(false)
	u := "/tagged/purged"
	stored := s.fillEverywhere(t, pods, u)
	out = s.kubectlOK(t, "tiercache", "purge", tierName, "-n", appNS, "--url", u)
	t.Logf("kubectl tiercache purge:\n%s", out)
	for _, p := range pods {
		eventually(t, "the purge reaches "+p.Name, 5*time.Second, func() error {
			a, err := get(t.Context(), nc, podURL(p, 15180)+u)
			if err != nil {
				return err
			}
			if a.body == stored {
				return fmt.Errorf("X-Cache %q, the purged copy", a.xcache)
			}
			return nil
		})
	}

	// --all right after another purge meets the sidecar's rate limit
	// (429 with a short Retry-After): the plugin waits and succeeds.
	for range 2 {
		out = s.kubectlOK(t, "tiercache", "purge", tierName, "-n", appNS, "--all")
	}
	t.Logf("kubectl tiercache purge --all, twice:\n%s", out)

	out = s.kubectlOK(t, "tiercache", "explain", tierName, "-n", appNS, "http://"+serviceHost+"/tagged/x")
	if !strings.Contains(out, "/tagged/x") {
		t.Fatalf("kubectl tiercache explain does not name the URL's path:\n%s", out)
	}
	t.Logf("kubectl tiercache explain:\n%s", out)
}

// fillEverywhere makes u a hit in every pod's L1 and returns the body,
// the same stored copy everywhere.
func (s *suite) fillEverywhere(t *testing.T, pods []corev1.Pod, u string) string {
	t.Helper()
	nc := s.httpClient(false)
	var body string
	for _, p := range pods {
		eventually(t, u+" a hit on "+p.Name, 10*time.Second, func() error {
			a, err := get(t.Context(), nc, podURL(p, 15180)+u)
			if err != nil {
				return err
			}
			if a.xcache != "HIT; layer=l1" {
				return fmt.Errorf("X-Cache %q", a.xcache)
			}
			if body == "" {
				body = a.body
			}
			if a.body != body {
				return fmt.Errorf("%s holds another copy than the first pod: %q, want %q", p.Name, a.body, body)
			}
			return nil
		})
	}
	return body
}

// readyCondition is the tier's Ready condition.
func readyCondition(ct *v1alpha1.CacheTier) *metav1.Condition {
	return meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionReady)
}

// dumpLogs logs the end of the sidecars' and the operator's logs, access
// lines left out, for a failed step.
func (s *suite) dumpLogs(t *testing.T) {
	for _, q := range [][]string{
		{"-n", appNS, "-l", "app=" + appName, "-c", inject.ContainerName},
		{"-n", releaseNS, "-l", "app.kubernetes.io/component=operator"},
	} {
		out, err := s.exec(context.Background(), 30*time.Second, append([]string{s.kubectl, "logs", "--tail=-1", "--prefix", "--max-log-requests=10"}, q...)...)
		byPod := map[string][]string{}
		var order []string
		for line := range strings.Lines(out) {
			if strings.Contains(line, `"msg":"access"`) {
				continue
			}
			pod, _, _ := strings.Cut(line, " ")
			if _, seen := byPod[pod]; !seen {
				order = append(order, pod)
			}
			byPod[pod] = append(byPod[pod], line)
		}
		var b strings.Builder
		for _, pod := range order {
			lines := byPod[pod]
			b.WriteString(strings.Join(lines[max(0, len(lines)-15):], ""))
		}
		t.Logf("kubectl logs %v (%v), without access lines:\n%s", q, err, b.String())
	}
}
