package inject

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

const (
	mi = 1 << 20
	// maxBodyStore bounds BodyStoreSize (admission allows at most 1Ti).
	maxBodyStore = 1 << 40
)

// DerivedMemory is the sidecar's memory request and limit when the
// CacheTier sets no resources: the sidecar's automatic Go soft memory
// limit (tierconfig.AutoMemoryLimit: l1.maxSize + 48Mi) plus
// derivedSlack and a quarter of the L1 size, rounded up to a whole Mi;
// 1.25 × the L1 size + 128Mi in all. It must stay above what the process
// may use, or the kernel kills the container where the Go runtime would
// only have collected more often: the Go limit, plus the RSS that is not
// Go memory (the binary's text, about 12Mi measured), plus what the
// sidecar raises its limit to while the live heap outgrows the floor
// (bigcache's per-shard scratch buffers, which grow to the largest entry
// each shard has taken, a large L1's index, an L1 resize): the sidecar
// never raises it past the floor it started with + a quarter of that L1
// size + 64Mi (internal/sidecar ceilingFor, kept through a live resize),
// which leaves 16Mi of this room for the RSS that is not Go memory. A negative size counts as 0; a result too
// large for a quantity saturates at the largest one.
func DerivedMemory(l1 int64) resource.Quantity {
	l1 = max(l1, 0)
	// ceil(l1 × 5/4 / Mi) without overflowing for any int64.
	const unit = 4 * mi
	q, r := l1/unit, l1%unit
	n := 5*q + (5*r+unit-1)/unit + (int64(tierconfig.MemoryAllowance)+derivedSlack)/mi
	return resource.MustParse(strconv.FormatInt(n, 10) + "Mi")
}

// derivedSlack is what DerivedMemory adds to the Go limit besides a
// quarter of the L1 size: non-Go RSS and the sidecar's live-heap headroom,
// with room to spare.
const derivedSlack = 80 * mi

// goMemoryLimit is the --memory-limit flag value for a container memory
// limit: 90% of it, rounded down to a whole Mi (at least 1Mi), so the Go
// runtime's soft limit sits below the kernel's hard one.
func goMemoryLimit(limit resource.Quantity) string {
	return strconv.FormatInt(max(goMemoryBytes(limit)/mi, 1), 10) + "Mi"
}

// goMemoryBytes is 90% of limit, rounded down to a whole Mi.
func goMemoryBytes(limit resource.Quantity) int64 {
	v := limit.Value()
	return (v/10*9 + v%10*9/10) / mi * mi
}

func sidecarContainer(p Params, portName string, appPort int32, ov Overrides, drain, timeout time.Duration) (corev1.Container, error) {
	port, admin := p.ports()
	args := []string{
		fmt.Sprintf("--listen=:%d", port),
		fmt.Sprintf("--admin-listen=:%d", admin),
		fmt.Sprintf("--upstream=http://127.0.0.1:%d", appPort),
		"--tier=" + p.Tier,
		"--state-dir=" + StateDir,
		"--log-format=json",
		"--drain-delay=" + drain.String(),
		"--shutdown-timeout=" + timeout.String(),
	}
	if ov.LogLevel != "" {
		args = append(args, "--log-level="+ov.LogLevel)
	}
	mounts := []corev1.VolumeMount{{Name: VolumeName, MountPath: StateDir}}
	if p.ControlPlane != "" {
		args = append(args, "--control-plane="+p.ControlPlane)
	}
	if len(p.Secrets) > 0 {
		args = append(args, "--secrets-dir="+SecretsDir)
		mounts = append(mounts, corev1.VolumeMount{Name: SecretsVolumeName, MountPath: SecretsDir, ReadOnly: true})
	}
	if p.xdsToken() {
		args = append(args, "--control-plane-token-file="+XDSTokenDir+"/"+XDSTokenFile)
		mounts = append(mounts, corev1.VolumeMount{Name: XDSTokenVolume, MountPath: XDSTokenDir, ReadOnly: true})
	}
	// tmpfs pages are charged to the memory cgroup of the container that
	// writes them (the sidecar), and they cannot be reclaimed while the
	// files exist: a Memory body store of size S needs S more memory
	// than the process itself.
	var tmpfs int64
	if p.BodyStoreSize > 0 {
		args = append(args, "--body-dir="+BodyDir, "--body-dir-size="+tierconfig.Size(p.BodyStoreSize).String())
		mounts = append(mounts, corev1.VolumeMount{Name: BodiesVolumeName, MountPath: BodyDir})
		if p.BodyStoreMedium == corev1.StorageMediumMemory {
			tmpfs = p.BodyStoreSize
		}
	}

	var res corev1.ResourceRequirements
	if p.Resources != nil {
		res = *p.Resources.DeepCopy()
	} else {
		// The sidecar's own --memory-limit=auto derives the Go limit from
		// l1.maxSize alone, which stays right: the tmpfs is not heap.
		mem := DerivedMemory(p.L1MaxSize)
		if tmpfs > 0 {
			mem.Add(*resource.NewQuantity(roundUpMi(tmpfs), resource.BinarySI))
		}
		res = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceMemory: mem,
				corev1.ResourceCPU:    resource.MustParse("100m"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: mem.DeepCopy()},
		}
	}
	res, err := ov.applyResources(res)
	if err != nil {
		return corev1.Container{}, err
	}
	_, memAnnotated := ov.Limits[corev1.ResourceMemory]
	if limit, ok := res.Limits[corev1.ResourceMemory]; ok && (p.Resources != nil || memAnnotated) {
		// The Go heap gets 90% of what the tmpfs leaves (admission
		// keeps at least 64Mi for it when the tier sets the limit).
		limit.Sub(*resource.NewQuantity(tmpfs, resource.BinarySI))
		goLimit := goMemoryLimit(limit)
		if memAnnotated && goMemoryBytes(limit) < minGoMemory {
			return corev1.Container{}, fmt.Errorf("annotation %s: %s leaves the sidecar's Go runtime %s (90%% of the limit less a Memory body store of %s), below its %s minimum; raise the limit",
				AnnotationMemoryLimit, ov.Limits.Memory(), goLimit, tierconfig.Size(tmpfs), tierconfig.Size(minGoMemory))
		}
		args = append(args, "--memory-limit="+goLimit)
	}

	always := corev1.ContainerRestartPolicyAlways
	return corev1.Container{
		Name:            ContainerName,
		Image:           p.Image,
		ImagePullPolicy: p.ImagePullPolicy,
		Args:            args,
		Ports: []corev1.ContainerPort{
			{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP},
			{Name: AdminPortName, ContainerPort: admin, Protocol: corev1.ProtocolTCP},
		},
		Env:            env(p, res),
		Resources:      res,
		VolumeMounts:   mounts,
		ReadinessProbe: httpProbe("/readyz", admin, 2, 2),
		LivenessProbe:  httpProbe("/healthz", admin, 10, 3),
		StartupProbe:   httpProbe("/healthz", admin, 1, 30),
		RestartPolicy:  &always,
		// No uid or gid unless the operator sets one: the image's USER is
		// numeric (65532), which satisfies runAsNonRoot anywhere, and
		// OpenShift's restricted SCC refuses a uid outside the
		// namespace's range but assigns one to a container without.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                p.RunAsUser,
			RunAsGroup:               p.RunAsGroup,
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}, nil
}

// env is the sidecar's whole environment: nothing of the pod's is merged
// into it, so each name is there once.
func env(p Params, res corev1.ResourceRequirements) []corev1.EnvVar {
	fieldRef := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: path},
		}}
	}
	vars := []corev1.EnvVar{
		fieldRef(EnvPodName, "metadata.name"),
		fieldRef(EnvPodNamespace, "metadata.namespace"),
	}
	// A zero CPU limit is none to the kubelet.
	if limit, ok := res.Limits[corev1.ResourceCPU]; ok && limit.Sign() > 0 {
		vars = append(vars, maxProcsEnv())
	}
	if p.ControlPlane != "" && len(p.ControlPlaneCA) > 0 {
		vars = append(vars, corev1.EnvVar{Name: EnvControlPlaneCAPEM, Value: string(p.ControlPlaneCA)})
	}
	if len(p.InitialConfig) > 0 {
		vars = append(vars, corev1.EnvVar{Name: EnvInitialConfig, Value: string(p.InitialConfig)})
	}
	if p.DrainToken != "" {
		vars = append(vars, corev1.EnvVar{Name: EnvDrainToken, Value: p.DrainToken})
	}
	return vars
}

// maxProcsEnv sets GOMAXPROCS to the sidecar's CPU limit rounded up to
// whole cores: the kubelet resolves a limits.cpu resourceFieldRef with
// divisor 1 to its ceiling (500m → 1, 1500m → 2). Go's own default under
// a CPU limit is the same ceiling but never below 2 (the runtime's
// adjustCgroupGOMAXPROCS), so a sidecar limited to one core or less would
// run two Ps and be throttled under load; one P takes a sixth to a
// quarter less CPU per large hit (docs/benchmarks.md, "The scheduler's
// share"). Envoy sizes its workers the same way. What Go's default would
// do and this does not: cap the value at the node's CPU count, and follow
// an in-place resize of the limit (the variable keeps the value the
// container started with).
func maxProcsEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: EnvGOMAXPROCS, ValueFrom: &corev1.EnvVarSource{
		ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: ContainerName,
			Resource:      "limits.cpu",
			Divisor:       resource.MustParse("1"),
		},
	}}
}

func httpProbe(path string, port, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path,
			Port: intstr.FromInt32(port),
		}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
	}
}

// xdsTokenVolume projects a ServiceAccount token of audience for the
// control plane; the kubelet rewrites it before it expires.
func xdsTokenVolume(audience string) corev1.Volume {
	return corev1.Volume{Name: XDSTokenVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience:          audience,
				ExpirationSeconds: ptr.To(int64(XDSTokenExpirationSeconds)),
				Path:              XDSTokenFile,
			}}},
		},
	}}
}

// roundUpMi rounds n up to a whole Mi, so that derived quantities stay in
// Mi.
func roundUpMi(n int64) int64 { return (n + mi - 1) / mi * mi }

// bodiesVolume is the body store's emptyDir: size for the files plus an
// eighth of headroom (the files' headers and trailers, the filesystem's
// own overhead), so that the store's budget is reached before the
// kubelet's sizeLimit, past which it evicts the pod.
func bodiesVolume(size int64, medium corev1.StorageMedium) corev1.Volume {
	limit := resource.NewQuantity(size+size/8, resource.BinarySI)
	return corev1.Volume{Name: BodiesVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: limit},
	}}
}

func stateVolume() corev1.Volume {
	size := resource.MustParse("4Mi")
	return corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size},
	}}
}

// secretsVolume projects the files into one volume: one source per Secret
// (and optionality), in the order the files name them. The kubelet keeps
// the files current (an atomic ..data symlink swap), so a rotation reaches
// the running sidecar.
func secretsVolume(files []SecretFile) corev1.Volume {
	var sources []corev1.VolumeProjection
	index := map[SecretFile]int{} // by Secret and Optional only
	for _, f := range files {
		k := SecretFile{Secret: f.Secret, Optional: f.Optional}
		i, ok := index[k]
		if !ok {
			i = len(sources)
			index[k] = i
			src := &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: f.Secret}}
			if f.Optional {
				src.Optional = ptr.To(true)
			}
			sources = append(sources, corev1.VolumeProjection{Secret: src})
		}
		src := sources[i].Secret
		src.Items = append(src.Items, corev1.KeyToPath{Key: f.Key, Path: f.File})
	}
	return corev1.Volume{Name: SecretsVolumeName, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: sources},
	}}
}
