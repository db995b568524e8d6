package pods

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/operator/inject"
)

// liveBound is how soon every pod applies a CacheTier edit.
const liveBound = 2 * time.Second

// bypassHello is the rule the live edit adds.
const bypassHello = `  rules:
    - name: hello
      match: {path: /hello}
      bypass: true
`

// liveConfig: a CacheTier edit is applied by every pod within 2 s; an
// invalid edit is refused at admission, naming the field.
func (s *suite) liveConfig(t *testing.T) {
	pods := s.appPods(t)
	s.fillEverywhere(t, pods, "/hello")

	s.applyOK(t, s.tierManifest(bypassHello))
	edited := time.Now()
	var wg sync.WaitGroup
	took := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := s.httpClient(false)
			deadline := edited.Add(10 * time.Second)
			for time.Now().Before(deadline) {
				a, err := get(t.Context(), nc, podURL(p, 15180)+"/hello")
				if err == nil && a.xcache == "BYPASS" {
					took[i] = time.Since(edited)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			errs[i] = fmt.Errorf("%s still caches /hello 10s after the edit", p.Name)
		}()
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Logf("%s applied the edit %.2fs after kubectl apply returned", p.Name, took[i].Seconds())
		if took[i] > liveBound {
			t.Errorf("%s applied the edit after %s, want within %s", p.Name, took[i], liveBound)
		}
	}
	s.waitColumns(t, map[string]string{"READY": "True", "CURRENT": "3", "REJECTED": "0"}, 30*time.Second)

	// An invalid edit: refused by the validating webhook, with the field
	// named; the tier keeps its config.
	before := s.tier(t).Status.ConfigHash
	out, err := s.apply(t, s.tierManifest(`  rules:
    - name: broken
      match: {regex: "/api/(v1"}
`))
	if err == nil {
		t.Fatalf("an invalid regex was admitted:\n%s", out)
	}
	// The CRD's own validation (CEL) answers first here; the webhook
	// checks the same with the sidecar's code.
	if !strings.Contains(out, "is invalid") || !strings.Contains(out, "spec.rules[0].match.regex") {
		t.Fatalf("the refusal does not name the field (spec.rules[0].match.regex):\n%s", out)
	}
	t.Logf("invalid edit refused: %s", strings.TrimSpace(out))
	if h := s.tier(t).Status.ConfigHash; h != before {
		t.Fatalf("config hash %s after a refused edit, want %s", h, before)
	}
	s.rejectedConfig(t)
}

// rejectedConfig: a config that admission accepts and the sidecars
// refuse shows as REJECTED. The pods mount a Redis CA that is not a
// certificate (admission does not read Secret values), unused while L2
// TLS is off; turning TLS on makes every sidecar refuse the config (it
// cannot build its L2 client) and keep the one in force.
func (s *suite) rejectedConfig(t *testing.T) {
	s.applyOK(t, `apiVersion: v1
kind: Secret
metadata:
  name: redis-ca
  namespace: `+appNS+`
  labels: {tiercache.io/allow-reference: "true"}
stringData: {ca.crt: "not a certificate"}
`)
	s.l2Extra = "    tls: {enabled: false, caSecretRef: {name: redis-ca, key: ca.crt}}\n"
	s.applyOK(t, s.tierManifest(bypassHello))
	// A new Secret reference reaches pods created after it.
	s.kubectlOK(t, "rollout", "restart", "-n", appNS, "deployment/"+appName)
	s.waitRollout(t, appNS, appName, 3*time.Minute)
	s.waitAppReady(t, 3, time.Minute)
	s.waitColumns(t, map[string]string{"READY": "True", "CURRENT": "3"}, time.Minute)

	s.l2Extra = "    tls: {enabled: true, caSecretRef: {name: redis-ca, key: ca.crt}}\n"
	s.applyOK(t, s.tierManifest(bypassHello))
	s.waitColumns(t, map[string]string{"READY": "False", "REJECTED": "3", "CURRENT": "0"}, 30*time.Second)
	r := readyCondition(s.tier(t))
	t.Logf("refused by the sidecars: Ready %s %s: %s", r.Status, r.Reason, r.Message)
	if r.Reason != "ConfigRejected" {
		t.Fatalf("Ready %+v, want reason ConfigRejected", r)
	}
	// Still serving, on the config in force.
	s.fillEverywhere(t, s.appPods(t), "/tagged/while-rejected")

	s.l2Extra = "    tls: {enabled: false, caSecretRef: {name: redis-ca, key: ca.crt}}\n"
	s.applyOK(t, s.tierManifest(bypassHello))
	s.waitColumns(t, map[string]string{"READY": "True", "REJECTED": "0", "CURRENT": "3"}, 30*time.Second)
}

// zeroTrust: a pod in another namespace, with its own projected token
// for the control plane's audience, asks for this tier as one of its
// pods: refused. Its ServiceAccount reads none of the tier's Secrets.
func (s *suite) zeroTrust(t *testing.T) {
	const ns = "intruder"
	s.kubectlOK(t, "create", "namespace", ns)
	victim := s.appPods(t)[0]
	sc := victim.Spec.InitContainers[0]
	// The real sidecar, with the injected args and env, claiming to be
	// the victim pod of shop/web; only its token is its own.
	var env []corev1.EnvVar
	for _, e := range sc.Env {
		switch e.Name {
		case inject.EnvPodName:
			e = corev1.EnvVar{Name: e.Name, Value: victim.Name}
		case inject.EnvPodNamespace:
			e = corev1.EnvVar{Name: e.Name, Value: appNS}
		}
		env = append(env, e)
	}
	var args []string
	for _, a := range sc.Args {
		if !strings.HasPrefix(a, "--secrets-dir") {
			args = append(args, a)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "impostor", Labels: map[string]string{inject.LabelTier: tierName}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "impostor", Image: sc.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: args, Env: env,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "token", MountPath: inject.XDSTokenDir, ReadOnly: true},
					{Name: "state", MountPath: inject.StateDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: "tiercache-xds", ExpirationSeconds: ptr.To[int64](600), Path: inject.XDSTokenFile}}}}}},
				{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	// The namespace's default ServiceAccount comes a moment after it.
	eventually(t, "the impostor pod created", 30*time.Second, func() error {
		return s.c.Create(t.Context(), pod.DeepCopy())
	})
	var logs string
	eventually(t, "the impostor is refused by the control plane", 90*time.Second, func() error {
		out, err := s.exec(t.Context(), 30*time.Second, s.kubectl, "logs", "-n", ns, "impostor")
		logs = out
		if err != nil {
			return err
		}
		if !strings.Contains(out, "PermissionDenied") {
			return fmt.Errorf("no PermissionDenied in its log yet:\n%s", out)
		}
		return nil
	})
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "PermissionDenied") {
			t.Logf("the impostor's log: %s", strings.TrimSpace(line))
			break
		}
	}
	if strings.Contains(logs, `"config applied"`) {
		t.Fatalf("the impostor applied a config of the tier:\n%s", logs)
	}
	s.waitColumns(t, map[string]string{"CONNECTED": "3"}, 10*time.Second)

	// The impostor's identity (its ServiceAccount, as its token says)
	// reads no Secret of the tier's namespace.
	tr, err := s.n.Client().CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), "default",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	must(t, err)
	cfg := s.n.RESTConfig()
	cfg.TLSClientConfig = rest.TLSClientConfig{CAData: cfg.CAData, CAFile: cfg.CAFile}
	cfg.BearerToken = tr.Status.Token
	as, err := client.New(cfg, client.Options{Scheme: newScheme(t)})
	must(t, err)
	for _, name := range []string{inject.GeneratedSecretName(tierName)} {
		var sec corev1.Secret
		err := as.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: name}, &sec)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("the impostor's ServiceAccount reading Secret %s/%s: %v, want Forbidden", appNS, name, err)
		}
	}
	var list corev1.SecretList
	if err := as.List(t.Context(), &list, client.InNamespace(appNS)); !apierrors.IsForbidden(err) {
		t.Fatalf("the impostor's ServiceAccount listing Secrets of %s: %v, want Forbidden", appNS, err)
	}
	must(t, s.c.Delete(t.Context(), pod))
}
