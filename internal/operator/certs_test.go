package operator

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/test/testkube"
)

// TestSelfManagedCertificates runs an operator with --cert-mode=self on an
// API server of its own whose webhook registrations carry no caBundle:
// the operator must create its CA and serving certificate, store them in
// its Secret, patch both registrations' caBundle, and then serve
// admissions that the API server verifies against that CA.
func TestSelfManagedCertificates(t *testing.T) {
	needCluster(t)
	env := &envtest.Environment{CRDDirectoryPaths: cluster.env.CRDDirectoryPaths, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := admissionv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "tc-certs"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	base := "https://localhost:" + strconv.Itoa(port)
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	validate := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tc-certs-validate"},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    "validate.cachetier.tiercache.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig:            admissionv1.WebhookClientConfig{URL: ptrTo(base + CacheTierValidatePath)},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"tiercache.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"cachetiers"}},
			}},
		}},
	}
	mutate := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tc-certs-inject"},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    "inject.tiercache.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig:            admissionv1.WebhookClientConfig{URL: ptrTo(base + PodMutatePath)},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			MatchConditions: []admissionv1.MatchCondition{{
				Name: "annotated", Expression: "has(object.metadata.annotations) && 'tiercache.io/tier' in object.metadata.annotations",
			}},
		}},
	}
	for _, o := range []client.Object{validate, mutate} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// Before the operator runs, the API server cannot reach a webhook:
	// failurePolicy Fail refuses tiers.
	if err := c.Create(ctx, newTier("default", "early", v1alpha1.CacheTierSpec{})); err == nil {
		t.Fatal("a tier was admitted with no webhook serving")
	}

	certDir := t.TempDir()
	xdsPort := freePort(t)
	reg := prometheus.NewRegistry()
	opCtx, stop := context.WithCancel(ctx)
	// In a cluster the kubelet projects the certificate Secret into the
	// operator's pod at --webhook-cert-dir (the chart mounts it). There is
	// no kubelet here: this goroutine plays its part.
	kubelet := make(chan struct{})
	go func() {
		defer close(kubelet)
		testkube.ProjectSecret(opCtx, c, client.ObjectKey{Namespace: ns, Name: "tc-certs-secret"}, certDir)
	}()
	done := make(chan error, 1)
	go func() {
		done <- RunWith(opCtx, []string{
			"--namespace=" + ns,
			"--cert-mode=self",
			"--cert-secret=tc-certs-secret",
			"--webhook-host=127.0.0.1",
			"--webhook-port=" + strconv.Itoa(port),
			"--webhook-cert-dir=" + certDir,
			"--mutating-webhook-configuration=tc-certs-inject",
			"--validating-webhook-configuration=tc-certs-validate",
			"--leader-elect=false",
			"--metrics-bind-address=0",
			"--health-probe-bind-address=127.0.0.1:0",
			"--xds-listen=127.0.0.1:" + strconv.Itoa(xdsPort),
			"--xds-service=tc-xds",
			"--control-plane-address=tc-xds.tc-certs.svc:" + strconv.Itoa(xdsPort),
			"--status-refresh=1s",
			// Stopped at once: shutdown_test.go tests the delay.
			"--shutdown-delay=0",
		}, Env{Getenv: func(string) string { return "" }, Stderr: logSink(), RestConfig: cfg, CertExtraDNSNames: []string{"localhost"}, SkipNameValidation: true, Registerer: reg})
	}()
	t.Cleanup(func() {
		stop()
		<-kubelet
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("operator did not stop within 30s")
		}
	})

	eventually(t, 60*time.Second, func() error {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tc-certs-secret"}, &s); err != nil {
			return err
		}
		if len(s.Data["ca.crt"]) == 0 || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
			return fmt.Errorf("secret keys %v", keys(s.Data))
		}
		var v admissionv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(validate), &v); err != nil {
			return err
		}
		var m admissionv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(mutate), &m); err != nil {
			return err
		}
		if string(v.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) || string(m.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) {
			return errors.New("caBundle not injected into both webhook configurations")
		}
		return nil
	})

	// The API server now verifies the operator's certificate: a valid
	// tier is admitted and an invalid one refused by the webhook itself.
	eventually(t, 60*time.Second, func() error {
		return c.Create(ctx, newTier("default", "pages", v1alpha1.CacheTierSpec{}))
	})
	err = c.Create(ctx, newTier("default", "bad", v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("512Ki")}}))
	if err == nil || !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), "spec.l1.maxSize") {
		t.Errorf("an invalid tier: %v", err)
	}

	// The same certificate serves xDS: it names the xDS Service.
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tc-certs-secret"}, &secret); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tc-xds.tc-certs.svc", "tc-xds.tc-certs.svc.cluster.local"} {
		if !slices.Contains(cert.DNSNames, name) {
			t.Errorf("the certificate names %v, not the xDS Service's %s", cert.DNSNames, name)
		}
	}
	xdsOverTLSWithToken(t, c, xdsPort, string(secret.Data["ca.crt"]), reg)
}

// xdsOverTLSWithToken: a pod injected by the operator (self-managed
// certificate) gets the CA and a token volume; its sidecar, run with
// those, gets its config over TLS; after the token file is rotated and the
// connection cut, it reconnects with the new token.
func xdsOverTLSWithToken(t *testing.T, c client.Client, xdsPort int, caPEM string, reg *prometheus.Registry) {
	ctx := context.Background()
	const ns = "default"
	if err := c.Create(ctx, newTier(ns, "live", v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{
		Name: "page", Match: v1alpha1.Match{Path: "/page"}, Bypass: true,
	}}})); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0", Annotations: map[string]string{inject.AnnotationTier: "live"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "example.test/app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Spec.ServiceAccountName}}); err != nil {
		t.Fatal(err)
	}
	sc := pod.Spec.InitContainers[0]
	var injectedCA string
	for _, e := range sc.Env {
		if e.Name == inject.EnvControlPlaneCAPEM {
			injectedCA = e.Value
		}
	}
	if injectedCA != caPEM {
		t.Fatalf("the injected %s is %q, want the certificate Secret's ca.crt", inject.EnvControlPlaneCAPEM, injectedCA)
	}
	if !slices.Contains(sc.Args, "--control-plane-token-file="+inject.XDSTokenDir+"/"+inject.XDSTokenFile) {
		t.Fatalf("the injected sidecar has no token file flag: %v", sc.Args)
	}

	// The kubelet's part: the token file. The sidecar reaches the
	// control plane through a cuttable relay, by the name localhost.
	tokenFile := filepath.Join(t.TempDir(), inject.XDSTokenFile)
	token := func() string {
		tok, err := testkube.PodToken(ctx, c, pod, "tiercache-xds", 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	testkube.WriteToken(t, tokenFile, token())
	relay := startRelay(t, "127.0.0.1:"+strconv.Itoa(xdsPort))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "page\n") }))
	defer origin.Close()
	a := runSidecar(t, origin.URL, ns, "live", "web-0", relay.addr,
		"--control-plane-token-file="+tokenFile, "--control-plane-ca-pem="+injectedCA)
	xcache := xcacheOf(a.Serve + "/page")
	eventually(t, 30*time.Second, func() error {
		if x := xcache(); !strings.HasPrefix(x, "BYPASS") {
			return fmt.Errorf("X-Cache %q, want BYPASS from the pushed rule", x)
		}
		return nil
	})
	reviewed := func() float64 { return counterValue(t, reg, "tiercache_xds_token_reviews_total", reviewAuthenticated) }
	if n := reviewed(); n != 1 {
		t.Fatalf("%v TokenReviews for the first token, want 1", n)
	}

	// The kubelet refreshes the token; the connection drops; the sidecar
	// reconnects with the new token (a second review) and stays served.
	testkube.WriteToken(t, tokenFile, token())
	relay.cut()
	eventually(t, 30*time.Second, func() error {
		if n := reviewed(); n != 2 {
			return fmt.Errorf("%v TokenReviews, want 2 after reconnecting with the new token", n)
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "live"}, &tier); err != nil {
			return err
		}
		if tier.Status.ConnectedSidecars != 1 {
			return fmt.Errorf("connectedSidecars = %d after the reconnect", tier.Status.ConnectedSidecars)
		}
		return nil
	})
}

// relay forwards TCP connections to a target until cut closes them all.
type relay struct {
	addr string
	mu   sync.Mutex
	open []net.Conn
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	r := &relay{addr: "localhost:" + port}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			r.open = append(r.open, in, out)
			r.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		r.cut()
		wg.Wait()
	})
	return r
}

// cut closes every relayed connection.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.open {
		c.Close()
	}
	r.open = nil
}

// counterValue reads a counter of reg with label result.
func counterValue(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "result") == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
