// Package inject owns Tiercache's sidecar injection: the policy that decides
// which pods get the sidecar (InjectRequired) and the pod mutation itself
// (Inject). Both are pure functions of their inputs, with no client and no
// I/O, so that the admission webhook, the controller and the end-to-end tests
// share one definition of an injected pod, and so that the mutation can be
// pinned down by golden files (testdata/<case>.yaml → <case>.yaml.injected).
//
// The shape of an injected pod is a contract: the sidecar reads its flags and
// environment, Services reach it through the port name it takes over, and
// the controller counts pods by LabelTier. The names are exported from this
// package so that nobody repeats the strings.
package inject

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Params is everything Inject needs that is not in the pod: the rendered
// tier and the sidecar settings of its CacheTier.
type Params struct {
	// Tier is the CacheTier name, as found in AnnotationTier.
	Tier string
	// InitialConfig is the canonical JSON of the rendered sidecar config
	// with secret fields empty, placed in EnvInitialConfig as the sidecar's
	// start-up fallback. Empty means no such variable.
	InitialConfig []byte
	// ConfigHash is recorded in AnnotationConfigHash.
	ConfigHash string
	// L1MaxSize is the tier's L1 size in bytes; it drives DerivedMemory.
	L1MaxSize int64

	Image string
	// ImagePullPolicy "" leaves the field unset (the API server defaults
	// it from the image tag).
	ImagePullPolicy corev1.PullPolicy
	// Resources nil means derived from L1MaxSize (see DerivedMemory);
	// otherwise used verbatim.
	Resources *corev1.ResourceRequirements

	// Port and AdminPort are the sidecar's serving and admin ports; 0 means
	// DefaultPort and DefaultAdminPort.
	Port, AdminPort int32
	// ControlPlane is the xDS address; "" means no --control-plane flag.
	ControlPlane string
	// ControlPlaneCA is the PEM CA of the control plane's certificate,
	// placed in EnvControlPlaneCAPEM; empty means plaintext xDS.
	ControlPlaneCA []byte
	// TokenAudience is the audience of the projected ServiceAccount token
	// (XDSTokenVolume) the sidecar authenticates to the control plane
	// with; "" means no token. Both apply only with ControlPlane.
	TokenAudience string

	// Secrets are projected into SecretsDir as one read-only volume
	// (SecretsVolumeName); none means no volume and no --secrets-dir.
	Secrets []SecretFile

	// BodyStoreSize is the body store's budget in bytes
	// (spec.bodyStore.size): an emptyDir BodiesVolumeName with a sizeLimit
	// of 9/8 of it mounted at BodyDir, and --body-dir, --body-dir-size.
	// 0 means no body store.
	BodyStoreSize int64
	// BodyStoreMedium is the emptyDir medium: "" (the node's disk) or
	// Memory (tmpfs, charged to the sidecar's memory: see
	// sidecarContainer).
	BodyStoreMedium corev1.StorageMedium

	// RunAsUser and RunAsGroup set the sidecar's uid and gid; nil leaves
	// them unset: the image's numeric USER (65532), or what the pod's
	// securityContext or OpenShift's SCC assigns.
	RunAsUser, RunAsGroup *int64
	// DrainDelay is the sidecar's drain delay unless the pod's
	// AnnotationDrainDelay sets one; nil means DefaultDrainDelay. It is
	// cut to half the pod's grace period (see shutdown).
	DrainDelay *time.Duration
	// DrainToken is the pod's drain token: the fronted app container gets
	// a preStop hook that sends it to the sidecar's DrainPath, and the
	// sidecar gets it in EnvDrainToken (see drainHook). The webhook makes
	// a random one per pod. "" means no hook: the sidecar drains at its
	// SIGTERM only.
	DrainToken string
	// ScrapeAnnotations adds prometheus.io/scrape, /port and /path for the
	// sidecar's admin port (for a Prometheus that discovers pods by those
	// annotations rather than through the chart's PodMonitor), unless the
	// pod sets prometheus.io/scrape itself: its app's own metrics win.
	ScrapeAnnotations bool
	// FrontHTTP2 lets AnnotationPort pick a port whose name declares
	// HTTP/2 or gRPC (spec.sidecar.frontHTTP2); see DeclaredHTTP2 for
	// the Services that declare one.
	FrontHTTP2 bool
}

// The annotations a Prometheus with the common kubernetes-pods scrape
// config reads (ScrapeAnnotations).
const (
	AnnotationPrometheusScrape = "prometheus.io/scrape"
	AnnotationPrometheusPort   = "prometheus.io/port"
	AnnotationPrometheusPath   = "prometheus.io/path"
)

// SecretFile is one key of a Secret, projected as a file of SecretsDir.
type SecretFile struct {
	// File is the name in SecretsDir (FileRedisPassword...).
	File   string
	Secret string
	Key    string
	// Optional lets the pod start without the Secret or key (the file is
	// then missing: that secret is unset).
	Optional bool
}

func (p Params) ports() (port, admin int32) {
	port, admin = p.Port, p.AdminPort
	if port == 0 {
		port = DefaultPort
	}
	if admin == 0 {
		admin = DefaultAdminPort
	}
	return port, admin
}

// xdsToken reports whether the sidecar gets an xDS token.
func (p Params) xdsToken() bool { return p.ControlPlane != "" && p.TokenAudience != "" }

func (p Params) validate() error {
	if p.Tier == "" {
		return errors.New("params: Tier is empty")
	}
	if p.Image == "" {
		return errors.New("params: Image is empty")
	}
	seen := map[string]bool{}
	for _, f := range p.Secrets {
		if f.File == "" || f.Secret == "" || f.Key == "" {
			return fmt.Errorf("params: secret file %+v is incomplete", f)
		}
		if seen[f.File] {
			return fmt.Errorf("params: secret file %q is projected twice", f.File)
		}
		seen[f.File] = true
	}
	if p.L1MaxSize < 0 {
		return fmt.Errorf("params: L1MaxSize %d is negative", p.L1MaxSize)
	}
	switch {
	case p.BodyStoreSize < 0 || p.BodyStoreSize > maxBodyStore:
		return fmt.Errorf("spec.bodyStore.size: %d bytes is out of range", p.BodyStoreSize)
	case p.BodyStoreMedium != corev1.StorageMediumDefault && p.BodyStoreMedium != corev1.StorageMediumMemory:
		return fmt.Errorf("params: body store medium %q is neither the default nor Memory", p.BodyStoreMedium)
	case p.BodyStoreMedium != corev1.StorageMediumDefault && p.BodyStoreSize == 0:
		return errors.New("params: a body store medium without a size")
	}
	for _, id := range []struct {
		name string
		v    *int64
	}{{"--sidecar-run-as-user", p.RunAsUser}, {"--sidecar-run-as-group", p.RunAsGroup}} {
		if id.v != nil && *id.v < 1 {
			return fmt.Errorf("%s: must be > 0, the sidecar runs as non-root (got %d)", id.name, *id.v)
		}
	}
	if err := checkDrainToken(p.DrainToken); err != nil {
		return err
	}
	if d := p.DrainDelay; d != nil && (*d < 0 || *d > MaxDrainDelay) {
		return fmt.Errorf("--sidecar-drain-delay: must be between 0s and %s (got %s)", MaxDrainDelay, *d)
	}
	port, admin := p.ports()
	if port < 1 || port > 65535 {
		return fmt.Errorf("spec.sidecar.port: %d is not a valid port (1-65535)", port)
	}
	if admin < 1 || admin > 65535 {
		return fmt.Errorf("spec.sidecar.adminPort: %d is not a valid port (1-65535)", admin)
	}
	if port == admin {
		return fmt.Errorf("spec.sidecar.adminPort: %d is the same as spec.sidecar.port", admin)
	}
	return nil
}

// Inject adds the sidecar to pod, in place. A pod that already has the
// sidecar is left as it is and Inject returns nil, so injecting twice is the
// same as injecting once. On error pod is left untouched: the mutation is
// done on a copy that replaces *pod only when everything succeeded.
//
// Errors name what is wrong, with the CacheTier field or pod annotation to
// change where there is one.
func Inject(pod *corev1.Pod, p Params) error {
	if pod == nil {
		return errors.New("no pod to inject")
	}
	if injected(pod) {
		return nil
	}
	if err := p.validate(); err != nil {
		return err
	}
	out := pod.DeepCopy()
	if err := mutate(out, p); err != nil {
		return err
	}
	*pod = *out
	return nil
}

// mutate injects into pod, which the caller owns; on error pod may be half
// changed and must be thrown away.
func mutate(pod *corev1.Pod, p Params) error {
	spec := &pod.Spec
	if spec.HostNetwork {
		return errors.New("hostNetwork pods cannot be injected: the sidecar takes over the app's port name, which needs the pod's own network namespace")
	}
	for _, c := range allContainers(spec) {
		if c.Name == ContainerName {
			return fmt.Errorf("container name %q is reserved for the sidecar; rename the container", ContainerName)
		}
	}
	for i := range spec.Volumes {
		if n := spec.Volumes[i].Name; n == VolumeName || n == XDSTokenVolume || n == SecretsVolumeName || n == BodiesVolumeName {
			return fmt.Errorf("volume name %q is reserved for the sidecar; rename the volume", n)
		}
	}

	ov, err := PodOverrides(pod)
	if err != nil {
		return err
	}
	def := DefaultDrainDelay
	if p.DrainDelay != nil {
		def = *p.DrainDelay
	}
	drain, timeout, err := shutdown(gracePeriod(spec), def, ov.DrainDelay)
	if err != nil {
		return err
	}

	app, err := frontedPort(pod, p.FrontHTTP2)
	if err != nil {
		return err
	}
	appPort := &spec.Containers[app.container].Ports[app.port]
	portName := appPort.Name
	if portName == "" {
		portName = DefaultPortName
	}
	if err := checkCollisions(spec, p, appPort, portName); err != nil {
		return err
	}

	// Port takeover: the sidecar serves under the app port's name, so
	// Services targeting that name reach the cache; the app keeps the
	// number and its probes stop using the name it lost.
	if appPort.Name != "" {
		unnamePort(&spec.Containers[app.container], appPort.Name, appPort.ContainerPort)
		appPort.Name = ""
	}

	// The sidecar gets the token only when the app gets the hook.
	if p.DrainToken != "" {
		_, admin := p.ports()
		if !drainHook(&spec.Containers[app.container], admin, p.DrainToken, drain) {
			p.DrainToken = ""
		}
	}
	if p.RunAsUser == nil && podRunsAsRoot(spec) {
		p.RunAsUser = ptr.To(ImageUID)
	}
	sidecar, err := sidecarContainer(p, portName, appPort.ContainerPort, ov, drain, timeout)
	if err != nil {
		return err
	}
	at := sidecarIndex(spec.InitContainers)
	spec.InitContainers = slices.Insert(spec.InitContainers, at, sidecar)
	spec.Volumes = append(spec.Volumes, stateVolume())
	if p.xdsToken() {
		spec.Volumes = append(spec.Volumes, xdsTokenVolume(p.TokenAudience))
		// A projected token needs a ServiceAccount name; the API
		// server's ServiceAccount admission plugin sets "default" the
		// same way, but a cluster may run without it.
		if spec.ServiceAccountName == "" {
			spec.ServiceAccountName = "default"
		}
	}
	if len(p.Secrets) > 0 {
		spec.Volumes = append(spec.Volumes, secretsVolume(p.Secrets))
	}
	if p.BodyStoreSize > 0 {
		spec.Volumes = append(spec.Volumes, bodiesVolume(p.BodyStoreSize, p.BodyStoreMedium))
	}

	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[LabelTier] = p.Tier
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationConfigHash] = p.podHash()
	pod.Annotations[AnnotationUpstreamPort] = strconv.Itoa(int(appPort.ContainerPort))
	pod.Annotations[AnnotationInjected] = "true"
	if _, own := pod.Annotations[AnnotationPrometheusScrape]; p.ScrapeAnnotations && !own {
		_, admin := p.ports()
		pod.Annotations[AnnotationPrometheusScrape] = "true"
		pod.Annotations[AnnotationPrometheusPort] = strconv.Itoa(int(admin))
		pod.Annotations[AnnotationPrometheusPath] = "/metrics"
	}
	// Under Istio, kubelet probes and Prometheus scrapes of the admin
	// port would otherwise go through the mesh proxy, which refuses them
	// in plaintext under STRICT mTLS.
	if istioInjected(pod) {
		_, admin := p.ports()
		pod.Annotations[IstioExcludeInboundPorts] = excludeInboundPort(pod.Annotations[IstioExcludeInboundPorts], admin)
	}
	return nil
}

// podHash is the AnnotationConfigHash of the pod: ConfigHash, or with a
// body store, the sha256 of ConfigHash and the body store's size and
// medium. Those are pod-level (they shape the volume, the flags and the
// memory, not the config), so a change of them must show in the pods
// admitted after it, although the tier's config hash stays the same.
// Pods without a body store keep the plain config hash.
func (p Params) podHash() string {
	if p.BodyStoreSize == 0 {
		return p.ConfigHash
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00bodyStore.size=%d\x00bodyStore.medium=%s", p.ConfigHash, p.BodyStoreSize, p.BodyStoreMedium))
	return hex.EncodeToString(sum[:])
}

// allContainers returns pointers to the init and regular containers of spec.
func allContainers(spec *corev1.PodSpec) []*corev1.Container {
	all := make([]*corev1.Container, 0, len(spec.InitContainers)+len(spec.Containers))
	for i := range spec.InitContainers {
		all = append(all, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		all = append(all, &spec.Containers[i])
	}
	return all
}

// checkCollisions refuses sidecar ports or port names that another
// container of the pod already uses; appPort is about to lose its name to
// the sidecar, so only its number counts.
func checkCollisions(spec *corev1.PodSpec, p Params, appPort *corev1.ContainerPort, portName string) error {
	port, admin := p.ports()
	if portName == AdminPortName {
		return fmt.Errorf("container port name %q is reserved for the sidecar's admin port; rename the port", AdminPortName)
	}
	for _, c := range allContainers(spec) {
		for i := range c.Ports {
			cp := &c.Ports[i]
			switch cp.ContainerPort {
			case port:
				return fmt.Errorf("spec.sidecar.port: port %d is already used by container %q; pick another port in the CacheTier", port, c.Name)
			case admin:
				return fmt.Errorf("spec.sidecar.adminPort: port %d is already used by container %q; pick another port in the CacheTier", admin, c.Name)
			}
			if cp == appPort || cp.Name == "" {
				continue
			}
			if cp.Name == portName || cp.Name == AdminPortName {
				return fmt.Errorf("container port name %q of container %q is reserved for the sidecar; rename the port", cp.Name, c.Name)
			}
		}
	}
	return nil
}

// unnamePort rewrites every probe and lifecycle hook of c that refers to the
// port name to refer to its number instead: a named port resolves only
// against the container's own ports, and the name now belongs to the
// sidecar.
func unnamePort(c *corev1.Container, name string, number int32) {
	fix := func(port *intstr.IntOrString) {
		if port.Type == intstr.String && port.StrVal == name {
			*port = intstr.FromInt32(number)
		}
	}
	handler := func(h *corev1.ProbeHandler) {
		if h.HTTPGet != nil {
			fix(&h.HTTPGet.Port)
		}
		if h.TCPSocket != nil {
			fix(&h.TCPSocket.Port)
		}
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if probe != nil {
			handler(&probe.ProbeHandler)
		}
	}
	if c.Lifecycle != nil {
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h == nil {
				continue
			}
			if h.HTTPGet != nil {
				fix(&h.HTTPGet.Port)
			}
			if h.TCPSocket != nil {
				fix(&h.TCPSocket.Port)
			}
		}
	}
}

// ImageUID is the uid of the Tiercache image's USER (distroless nonroot).
const ImageUID int64 = 65532

// podRunsAsRoot says whether the pod's securityContext sets uid 0 for its
// containers. The sidecar would inherit it, and its runAsNonRoot would
// stop it from starting (the kubelet's CreateContainerConfigError
// "container's runAsUser breaks non-root policy"): so the sidecar is
// given the image's uid instead, and the app keeps running as root, as
// its owner asked.
func podRunsAsRoot(spec *corev1.PodSpec) bool {
	sc := spec.SecurityContext
	return sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0
}
