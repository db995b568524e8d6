package operator

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

func appPod(ns, name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "example.test/app:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstrName("http")},
			}},
		}}},
	}
}

func sidecarOf(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == inject.ContainerName {
			return &p.Spec.InitContainers[i]
		}
	}
	return nil
}

func envValue(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// TestPodsAreInjectedThroughTheAPIServer creates pods through the API
// server and reads them back: the annotated pod carries the sidecar, the
// others are untouched, a pod naming a missing tier is refused.
func TestPodsAreInjectedThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	tier := newTier(ns, "pages", v1alpha1.CacheTierSpec{
		L1:    v1alpha1.L1Spec{MaxSize: qty("64Mi")},
		Rules: []v1alpha1.Rule{{Name: "static", Match: v1alpha1.Match{PathPrefix: "/static/"}, TTL: "1h"}},
		Purge: v1alpha1.PurgeSpec{TokenSecretRef: secretRef("purge", "token")},
	})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, labelledSecret(ns, "purge", map[string]string{"token": "0123456789abcdef0123"})); err != nil {
		t.Fatal(err)
	}

	pod := appPod(ns, "web-1", map[string]string{inject.AnnotationTier: "pages"})
	eventually(t, 30*time.Second, func() error {
		// The webhook reads tiers from its cache, falling back to the API
		// server, so a tier created a moment ago is found.
		return c.Create(ctx, pod)
	})
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	sc := sidecarOf(&got)
	if sc == nil {
		t.Fatalf("the stored pod has no sidecar: init containers %v", got.Spec.InitContainers)
	}
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the sidecar is not a native sidecar (restartPolicy Always)")
	}
	if sc.Image != "example.test/tiercache-sidecar:test" {
		t.Errorf("image %q", sc.Image)
	}
	if got.Labels[inject.LabelTier] != "pages" {
		t.Errorf("labels %v", got.Labels)
	}
	var takeover bool
	for _, p := range sc.Ports {
		takeover = takeover || (p.Name == "http" && p.ContainerPort == inject.DefaultPort)
	}
	if !takeover {
		t.Errorf("the sidecar did not take over the port named http: %v", sc.Ports)
	}
	if app := got.Spec.Containers[0]; app.Ports[0].Name != "" || app.ReadinessProbe.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("app port %+v, probe port %v", app.Ports[0], app.ReadinessProbe.HTTPGet.Port)
	}
	wantArgs := []string{"--upstream=http://127.0.0.1:8080", "--tier=pages", "--control-plane=tiercache-xds.tiercache-system.svc:18000", "--secrets-dir=" + inject.SecretsDir}
	for _, a := range wantArgs {
		if !strings.Contains(strings.Join(sc.Args, " "), a) {
			t.Errorf("args %v lack %s", sc.Args, a)
		}
	}
	// The config in the pod spec is the rendered tier, without secrets:
	// the token reaches the container as a file of the projected volume.
	e, ok := envValue(sc, inject.EnvInitialConfig)
	if !ok {
		t.Fatal("no initial config in the pod spec")
	}
	cfg, err := tierconfig.Parse([]byte(e.Value))
	if err != nil {
		t.Fatalf("the initial config does not parse: %v", err)
	}
	if cfg.L1.MaxSize != 64<<20 || len(cfg.Rules) != 1 || cfg.Rules[0].TTL.Std() != time.Hour || cfg.Purge.Token != "" {
		t.Errorf("initial config %+v", cfg)
	}
	for _, e := range sc.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("a secret reaches the sidecar through env %s", e.Name)
		}
	}
	if got, want := projectedFiles(&got), "invalidation-key=pages-tiercache/invalidation-key purge-token=purge/token"; got != want {
		t.Errorf("projected secret files %q, want %q", got, want)
	}
	if !strings.HasPrefix(cfg.SecretVersions["purge-token"], "purge/token@") {
		t.Errorf("the initial config's secret versions %v lack the purge token Secret's", cfg.SecretVersions)
	}
	if got.Annotations[inject.AnnotationConfigHash] != cfg.Hash() {
		t.Errorf("config-hash annotation %q, config hashes %q", got.Annotations[inject.AnnotationConfigHash], cfg.Hash())
	}
	if mem, want := sc.Resources.Limits.Memory(), inject.DerivedMemory(64<<20); mem.Cmp(want) != 0 {
		t.Errorf("memory limit %s, want %s", mem, want.String())
	}

	// The controller counts the injected pod.
	eventually(t, 30*time.Second, func() error {
		var tr v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKeyFromObject(tier), &tr); err != nil {
			return err
		}
		if tr.Status.InjectedPods != 1 {
			return errorf("injectedPods = %d", tr.Status.InjectedPods)
		}
		return nil
	})

	// An unannotated pod is stored as sent.
	plain := appPod(ns, "plain", nil)
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(plain), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.InitContainers) != 0 || got.Spec.Containers[0].Ports[0].Name != "http" || got.Labels[inject.LabelTier] != "" {
		t.Errorf("an unannotated pod was changed: %+v", got.Spec)
	}

	// A pod naming a tier that does not exist is refused, naming it.
	err = c.Create(ctx, appPod(ns, "orphan", map[string]string{inject.AnnotationTier: "nope"}))
	if err == nil || !strings.Contains(err.Error(), `CacheTier "nope"`) || !strings.Contains(err.Error(), "missingTier") {
		t.Errorf("a pod naming a missing tier: %v", err)
	}

	// A pod whose port is not named http and that has no port annotation
	// is refused with the fix in the message, not fronted on a guess.
	unnamed := appPod(ns, "unnamed", map[string]string{inject.AnnotationTier: "pages"})
	unnamed.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9000}}
	unnamed.Spec.Containers[0].ReadinessProbe = nil
	err = c.Create(ctx, unnamed)
	if err == nil || !strings.Contains(err.Error(), `name the app's HTTP port "http", or set annotation tiercache.io/port: <name|number>`) {
		t.Errorf("a pod without a port named http: %v", err)
	}

	// Pods in the operator's namespace are never touched.
	own := appPod(operatorNS, "own", map[string]string{inject.AnnotationTier: "pages"})
	if err := c.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(own), &got); err != nil {
		t.Fatal(err)
	}
	if sidecarOf(&got) != nil {
		t.Error("a pod in the operator's namespace was injected")
	}
}

// TestInjectionRefusesAnInvalidTier: a tier stored while the validating
// webhook was unavailable (its failurePolicy set to Ignore, or before it
// was registered) must still not reach a pod. The API server cannot be
// made to store one here, so the handler's rendering is driven directly.
func TestInjectionRefusesAnInvalidTier(t *testing.T) {
	w := &podInjector{Opts: Options{SidecarImage: "img", MissingTier: MissingTierRefuse}}
	bad := newTier("ns", "bad", v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("512Ki")}})
	_, err := w.params(context.Background(), bad)
	if err == nil || !strings.Contains(err.Error(), "spec.l1.maxSize") {
		t.Fatalf("params of an invalid tier: %v", err)
	}
	good, err := w.params(context.Background(), newTier("ns", "good", v1alpha1.CacheTierSpec{}))
	if err != nil {
		t.Fatal(err)
	}
	var cfg tierconfig.Config
	if err := json.Unmarshal(good.InitialConfig, &cfg); err != nil || cfg.Hash() != tierconfig.Default().Hash() {
		t.Errorf("an empty tier renders %s (%v), want the built-in default", good.InitialConfig, err)
	}
}

// TestInjectionRefusesASidecarImageTheOperatorDoesNotAllow: whoever may
// edit a CacheTier must not choose the code that runs in the namespace's
// pods, even for a tier stored while the validating webhook was down.
func TestInjectionRefusesASidecarImageTheOperatorDoesNotAllow(t *testing.T) {
	w := &podInjector{Opts: Options{SidecarImage: "reg.example/tiercache:1", AllowedSidecarImages: []string{"reg.example/approved/*", "reg.example/pinned@sha256:aa"}, MissingTier: MissingTierRefuse}}
	cases := map[string]struct {
		image   string
		allowed bool
	}{
		"no image: the operator's":                     {"", true},
		"the operator's own image":                     {"reg.example/tiercache:1", true},
		"an image under an allowed prefix":             {"reg.example/approved/tiercache:2", true},
		"an exactly allowed image":                     {"reg.example/pinned@sha256:aa", true},
		"another tag of the operator's image":          {"reg.example/tiercache:evil", false},
		"an image of another registry":                 {"evil.example/tiercache:1", false},
		"an exact entry is not a prefix":               {"reg.example/pinned@sha256:aab", false},
		"a prefix without its slash is not the prefix": {"reg.example/approvedX/tiercache:2", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := w.params(context.Background(), newTier("ns", "t", v1alpha1.CacheTierSpec{Sidecar: v1alpha1.SidecarSpec{Image: tc.image}}))
			switch {
			case tc.allowed && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.allowed && tc.image != "" && p.Image != tc.image:
				t.Fatalf("injected %q, want %q", p.Image, tc.image)
			case !tc.allowed && (err == nil || !strings.Contains(err.Error(), "spec.sidecar.image") || !strings.Contains(err.Error(), "not allowed")):
				t.Fatalf("got %v, want a refusal naming spec.sidecar.image", err)
			}
		})
	}
}

// projectedFiles lists the pod's projected secret files, sorted, as
// "file=secret/key" (optional ones marked "?").
func projectedFiles(p *corev1.Pod) string {
	var out []string
	for _, v := range p.Spec.Volumes {
		if v.Name != inject.SecretsVolumeName || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret == nil {
				continue
			}
			opt := ""
			if src.Secret.Optional != nil && *src.Secret.Optional {
				opt = "?"
			}
			for _, it := range src.Secret.Items {
				out = append(out, it.Path+"="+src.Secret.Name+"/"+it.Key+opt)
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// labelledSecret is a Secret CacheTiers may reference.
func labelledSecret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{inject.LabelAllowReference: "true"}},
		StringData: data,
	}
	return s
}

// TestPerPodOverridesThroughTheAPIServer: the sidecar resource and drain
// delay annotations reach the injected sidecar, and a bad one is refused
// at admission with a message naming the annotation, before the tier is
// even looked up.
func TestPerPodOverridesThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	if err := c.Create(ctx, newTier(ns, "pages", v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("64Mi")}})); err != nil {
		t.Fatal(err)
	}

	pod := appPod(ns, "tuned", map[string]string{
		inject.AnnotationTier:          "pages",
		inject.AnnotationCPURequest:    "50m",
		inject.AnnotationCPULimit:      "1",
		inject.AnnotationMemoryRequest: "160Mi",
		inject.AnnotationMemoryLimit:   "192Mi",
		inject.AnnotationDrainDelay:    "8s",
	})
	eventually(t, 30*time.Second, func() error { return c.Create(ctx, pod) })
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	sc := sidecarOf(&got)
	if sc == nil {
		t.Fatal("the stored pod has no sidecar")
	}
	r := sc.Resources
	for name, pair := range map[string][2]resource.Quantity{
		"cpu request":    {*r.Requests.Cpu(), resource.MustParse("50m")},
		"cpu limit":      {*r.Limits.Cpu(), resource.MustParse("1")},
		"memory request": {*r.Requests.Memory(), resource.MustParse("160Mi")},
		"memory limit":   {*r.Limits.Memory(), resource.MustParse("192Mi")},
	} {
		if pair[0].Cmp(pair[1]) != 0 {
			t.Errorf("%s %s, want %s", name, pair[0].String(), pair[1].String())
		}
	}
	args := strings.Join(sc.Args, " ")
	for _, want := range []string{"--memory-limit=172Mi", "--drain-delay=8s", "--shutdown-timeout=22s"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	// The API server validates a resourceFieldRef: storing it proves
	// it is accepted on the native sidecar.
	if e, _ := envValue(sc, inject.EnvGOMAXPROCS); e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil ||
		!equality.Semantic.DeepEqual(*e.ValueFrom.ResourceFieldRef, corev1.ResourceFieldSelector{ContainerName: inject.ContainerName, Resource: "limits.cpu", Divisor: resource.MustParse("1")}) {
		t.Errorf("the stored sidecar's GOMAXPROCS is %+v, want a resourceFieldRef to its own limits.cpu, divisor 1", e)
	}

	for name, tc := range map[string]struct {
		annotations map[string]string
		want        string
	}{
		"a quantity that does not parse is refused, naming the annotation": {
			map[string]string{inject.AnnotationTier: "pages", inject.AnnotationMemoryLimit: "1 gig"},
			`annotation tiercache.io/sidecar-memory-limit: "1 gig" is not a quantity`,
		},
		"a request above the limit is refused, naming the annotation": {
			map[string]string{inject.AnnotationTier: "pages", inject.AnnotationCPURequest: "2", inject.AnnotationCPULimit: "1"},
			`annotation tiercache.io/sidecar-cpu-request: 2 is above tiercache.io/sidecar-cpu-limit: 1`,
		},
		"a bad annotation is named even when the tier does not exist": {
			map[string]string{inject.AnnotationTier: "nope", inject.AnnotationDrainDelay: "soon"},
			`annotation tiercache.io/sidecar-drain-delay: "soon" is not a duration`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.Create(ctx, appPod(ns, "refused", tc.annotations))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create: %v\nwant an error with %s", err, tc.want)
			}
		})
	}
}

// TestEachInjectedPodGetsItsOwnDrainHook: the app container's preStop hook
// sends the sidecar the token in its environment, and no two pods share
// one (knowing a pod's token drains only that pod).
func TestEachInjectedPodGetsItsOwnDrainHook(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	if err := c.Create(ctx, newTier(ns, "pages", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, name := range []string{"web-0", "web-1"} {
		pod := appPod(ns, name, map[string]string{inject.AnnotationTier: "pages"})
		eventually(t, 30*time.Second, func() error { return c.Create(ctx, pod) })
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			t.Fatal(err)
		}
		env, ok := envValue(sidecarOf(&got), inject.EnvDrainToken)
		if !ok || len(env.Value) < 20 {
			t.Fatalf("%s: the sidecar's drain token %q is missing or short", name, env.Value)
		}
		ls := got.Spec.Containers[0].Lifecycle
		if ls == nil || ls.PreStop == nil || ls.PreStop.HTTPGet == nil {
			t.Fatalf("%s: the app has no preStop httpGet: %+v", name, ls)
		}
		get := ls.PreStop.HTTPGet
		if get.Path != inject.DrainPath || get.Port.IntValue() != int(inject.DefaultAdminPort) ||
			len(get.HTTPHeaders) != 1 || get.HTTPHeaders[0].Name != "Authorization" || get.HTTPHeaders[0].Value != "Bearer "+env.Value {
			t.Errorf("%s: preStop %+v does not send the sidecar's token %q to %s on the admin port", name, get, env.Value, inject.DrainPath)
		}
		for other, tok := range tokens {
			if tok == env.Value {
				t.Errorf("%s and %s share a drain token", name, other)
			}
		}
		tokens[name] = env.Value
	}
}

// warningsSeen collects the admission warnings a client is sent.
type warningsSeen struct {
	mu   sync.Mutex
	list []string
}

func (w *warningsSeen) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningsSeen) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.list, "\n")
}

// TestAPodWhosePortAServiceDeclaresGRPCIsNotFronted: a Service with
// appProtocol grpc targets the port the sidecar would take over; the pod
// is admitted without the sidecar, with an admission warning and a
// Warning Event on the tier that say why and how to opt in, until the
// tier sets spec.sidecar.frontHTTP2.
func TestAPodWhosePortAServiceDeclaresGRPCIsNotFronted(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	tier := newTier(ns, "api", v1alpha1.CacheTierSpec{})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "api"}, Ports: []corev1.ServicePort{
			{Name: "grpc", Port: 80, TargetPort: intstrName("http"), AppProtocol: ptr.To("grpc")},
		}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	seen := &warningsSeen{}
	cfg := rest.CopyConfig(cluster.cfg)
	cfg.WarningHandler = seen
	wc, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	p := appPod(ns, "api-0", map[string]string{inject.AnnotationTier: "api"})
	p.Labels = map[string]string{"app": "api"}
	eventually(t, 30*time.Second, func() error {
		q := p.DeepCopy()
		if err := wc.Create(ctx, q); err != nil {
			return err
		}
		if sidecarOf(q) == nil {
			p = q
			return nil
		}
		if err := c.Delete(ctx, q, client.GracePeriodSeconds(0)); err != nil {
			return err
		}
		eventually(t, 30*time.Second, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(q), &corev1.Pod{}); !apierrors.IsNotFound(err) {
				return errorf("pod %s still there: %v", q.Name, err)
			}
			return nil
		})
		return errorf("pod %s was injected before the webhook saw Service api", q.Name)
	})
	if p.Annotations[inject.AnnotationInjected] != "" || p.Spec.Containers[0].Ports[0].Name != "http" {
		t.Fatalf("the pod was changed: annotations %v, ports %v", p.Annotations, p.Spec.Containers[0].Ports)
	}
	want := `the sidecar of CacheTier "api" was not injected: Service api port grpc declares appProtocol grpc (gRPC) for the pod's port http (8080), and the tier does not set spec.sidecar.frontHTTP2: true`
	if got := seen.all(); !strings.Contains(got, want) {
		t.Fatalf("admission warnings %q, want one with %q", got, want)
	}
	eventually(t, 30*time.Second, func() error {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "CacheTier" && e.InvolvedObject.Name == "api" && e.Type == corev1.EventTypeWarning &&
				e.Reason == v1alpha1.ReasonServiceDeclaresHTTP2 && strings.Contains(e.Message, "pod api-0: ") && strings.Contains(e.Message, want) {
				return nil
			}
		}
		return errorf("no Warning Event %s on CacheTier api among %d events", v1alpha1.ReasonServiceDeclaresHTTP2, len(evs.Items))
	})

	// The tier opts in: the next pod is fronted.
	if err := c.Get(ctx, client.ObjectKeyFromObject(tier), tier); err != nil {
		t.Fatal(err)
	}
	tier.Spec.Sidecar.FrontHTTP2 = true
	if err := c.Update(ctx, tier); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		q := appPod(ns, "api-1", map[string]string{inject.AnnotationTier: "api"})
		q.Labels = map[string]string{"app": "api"}
		if err := c.Create(ctx, q); err != nil {
			return err
		}
		if sidecarOf(q) != nil {
			return nil
		}
		if err := c.Delete(ctx, q, client.GracePeriodSeconds(0)); err != nil {
			return err
		}
		eventually(t, 30*time.Second, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(q), &corev1.Pod{}); !apierrors.IsNotFound(err) {
				return errorf("pod %s still there: %v", q.Name, err)
			}
			return nil
		})
		return errorf("pod api-1 was not injected: the webhook has not seen frontHTTP2 yet")
	})
}
