package inject

import (
	"math"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// errorPod is an injectable pod: app serves port 8080 named http.
func errorPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "pages-0", Namespace: "shop",
			Annotations: map[string]string{AnnotationTier: "pages"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.example/pages:1.4",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

func errorParams() Params {
	return Params{Tier: "pages", Image: "ghcr.io/tiercache/sidecar:test", L1MaxSize: 64 << 20}
}

func TestInjectErrors(t *testing.T) {
	tests := map[string]struct {
		pod    func(*corev1.Pod)
		params func(*Params)
		want   string
	}{
		"a pod without container ports cannot be fronted": {
			pod:  func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil },
			want: `no TCP container port to front: declare the app's HTTP port in containers[].ports and name it "http", or set annotation tiercache.io/port: <name|number>`,
		},
		"a pod with only UDP ports cannot be fronted": {
			pod:  func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP },
			want: `no TCP container port to front: declare the app's HTTP port in containers[].ports and name it "http", or set annotation tiercache.io/port: <name|number>`,
		},
		"a pod whose ports have other names is refused, not fronted on its first port": {
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9000}, {Name: "metrics", ContainerPort: 9100}}
			},
			want: `no container port named "http" to front (TCP ports: grpc (9000), metrics (9100)): name the app's HTTP port "http", or set annotation tiercache.io/port: <name|number>; the first port is not guessed, since it may be metrics or gRPC`,
		},
		"a pod with a single unnamed port is refused, not fronted on a guess": {
			pod:  func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 3000}} },
			want: `no container port named "http" to front (TCP ports: 3000): name the app's HTTP port "http", or set annotation tiercache.io/port: <name|number>; the first port is not guessed, since it may be metrics or gRPC`,
		},
		"a UDP port named http is not fronted": {
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8443, Protocol: corev1.ProtocolUDP}, {Name: "web", ContainerPort: 8080},
				}
			},
			want: `no container port named "http" to front (TCP ports: web (8080)): name the app's HTTP port "http", or set annotation tiercache.io/port: <name|number>; the first port is not guessed, since it may be metrics or gRPC`,
		},
		"a port annotation naming a gRPC port is refused": {
			pod: func(p *corev1.Pod) {
				p.Annotations[AnnotationPort] = "grpc-api"
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "grpc-api", ContainerPort: 9000})
			},
			want: `annotation tiercache.io/port: port "grpc-api (9000)" of container "app" is named for gRPC, which the sidecar does not cache (it passes HTTP/2 through to the app); front the app's HTTP/1.1 port and let gRPC traffic reach the app directly, or set spec.sidecar.frontHTTP2: true on the CacheTier to front this port anyway`,
		},
		"a port annotation numbering an h2c port is refused": {
			pod: func(p *corev1.Pod) {
				p.Annotations[AnnotationPort] = "9001"
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "H2C", ContainerPort: 9001})
			},
			want: `annotation tiercache.io/port: port "H2C (9001)" of container "app" is named for HTTP/2, which the sidecar does not cache (it passes HTTP/2 through to the app); front the app's HTTP/1.1 port and let HTTP/2 traffic reach the app directly, or set spec.sidecar.frontHTTP2: true on the CacheTier to front this port anyway`,
		},
		"a port annotation numbering only a UDP port is refused": {
			pod: func(p *corev1.Pod) {
				p.Annotations[AnnotationPort] = "8443"
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
					corev1.ContainerPort{Name: "h3", ContainerPort: 8443, Protocol: corev1.ProtocolUDP})
			},
			want: `annotation tiercache.io/port: port "8443" of container "app" is UDP; only TCP can be fronted`,
		},
		"a port annotation naming no port is refused": {
			pod:  func(p *corev1.Pod) { p.Annotations[AnnotationPort] = "web" },
			want: `annotation tiercache.io/port: no container port named or numbered "web"`,
		},
		"a port annotation numbering no port is refused": {
			pod:  func(p *corev1.Pod) { p.Annotations[AnnotationPort] = "8081" },
			want: `annotation tiercache.io/port: no container port named or numbered "8081"`,
		},
		"a port annotation naming a UDP port is refused": {
			pod: func(p *corev1.Pod) {
				p.Annotations[AnnotationPort] = "dns"
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
					corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP})
			},
			want: `annotation tiercache.io/port: port "dns" of container "app" is UDP; only TCP can be fronted`,
		},
		"a sidecar port the app already uses is refused": {
			params: func(p *Params) { p.Port = 8080 },
			want:   `spec.sidecar.port: port 8080 is already used by container "app"; pick another port in the CacheTier`,
		},
		"a sidecar port an init container uses is refused": {
			pod: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Ports: []corev1.ContainerPort{{ContainerPort: DefaultPort}}}}
			},
			want: `spec.sidecar.port: port 15180 is already used by container "proxy"; pick another port in the CacheTier`,
		},
		"an admin port another container uses is refused": {
			pod: func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
					Name: "exporter", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}},
				})
			},
			params: func(p *Params) { p.AdminPort = 9090 },
			want:   `spec.sidecar.adminPort: port 9090 is already used by container "exporter"; pick another port in the CacheTier`,
		},
		"an admin port equal to the sidecar port is refused": {
			params: func(p *Params) { p.Port, p.AdminPort = 9000, 9000 },
			want:   "spec.sidecar.adminPort: 9000 is the same as spec.sidecar.port",
		},
		"an admin port equal to the default sidecar port is refused": {
			params: func(p *Params) { p.AdminPort = DefaultPort },
			want:   "spec.sidecar.adminPort: 15180 is the same as spec.sidecar.port",
		},
		"a sidecar port out of range is refused": {
			params: func(p *Params) { p.Port = 70000 },
			want:   "spec.sidecar.port: 70000 is not a valid port (1-65535)",
		},
		"a negative admin port is refused": {
			params: func(p *Params) { p.AdminPort = -1 },
			want:   "spec.sidecar.adminPort: -1 is not a valid port (1-65535)",
		},
		"hostNetwork pods are refused": {
			pod:  func(p *corev1.Pod) { p.Spec.HostNetwork = true },
			want: "hostNetwork pods cannot be injected: the sidecar takes over the app's port name, which needs the pod's own network namespace",
		},
		"an existing tiercache-state volume is refused": {
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			},
			want: `volume name "tiercache-state" is reserved for the sidecar; rename the volume`,
		},
		"an app volume named tiercache-xds-token is refused": {
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: XDSTokenVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			},
			want: `volume name "tiercache-xds-token" is reserved for the sidecar; rename the volume`,
		},
		"an existing tiercache-secrets volume is refused": {
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: SecretsVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			},
			want: `volume name "tiercache-secrets" is reserved for the sidecar; rename the volume`,
		},
		"a secret file projected twice is refused": {
			params: func(p *Params) {
				p.Secrets = []SecretFile{{File: FilePurgeToken, Secret: "a", Key: "t"}, {File: FilePurgeToken, Secret: "b", Key: "t"}}
			},
			want: `params: secret file "purge-token" is projected twice`,
		},
		"a drain token that cannot be a header value is refused": {
			params: func(p *Params) { p.DrainToken = "two words" },
			want:   `params: DrainToken must be printable ASCII without spaces`,
		},
		"an app container named tiercache is refused": {
			pod:  func(p *corev1.Pod) { p.Spec.Containers[0].Name = ContainerName },
			want: `container name "tiercache" is reserved for the sidecar; rename the container`,
		},
		"another port named tc-admin is refused": {
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: AdminPortName, ContainerPort: 9000})
			},
			want: `container port name "tc-admin" of container "app" is reserved for the sidecar; rename the port`,
		},
		"a fronted port named tc-admin is refused": {
			pod: func(p *corev1.Pod) {
				p.Annotations[AnnotationPort] = AdminPortName
				p.Spec.Containers[0].Ports[0].Name = AdminPortName
			},
			want: `container port name "tc-admin" is reserved for the sidecar's admin port; rename the port`,
		},
		"an unnamed fronted port while another port is named tiercache is refused": {
			pod: func(p *corev1.Pod) {
				p.Annotations[AnnotationPort] = "8080"
				p.Spec.Containers[0].Ports[0].Name = ""
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
					Name: "other", Ports: []corev1.ContainerPort{{Name: DefaultPortName, ContainerPort: 7000}},
				})
			},
			want: `container port name "tiercache" of container "other" is reserved for the sidecar; rename the port`,
		},
		"params without a tier are refused": {
			params: func(p *Params) { p.Tier = "" },
			want:   "params: Tier is empty",
		},
		"params without an image are refused": {
			params: func(p *Params) { p.Image = "" },
			want:   "params: Image is empty",
		},
		"a negative L1 size is refused": {
			params: func(p *Params) { p.L1MaxSize = -1 },
			want:   "params: L1MaxSize -1 is negative",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, params := errorPod(), errorParams()
			if tc.pod != nil {
				tc.pod(pod)
			}
			if tc.params != nil {
				tc.params(&params)
			}
			before := pod.DeepCopy()
			err := Inject(pod, params)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Inject error = %v\nwant %s", err, tc.want)
			}
			if !reflect.DeepEqual(pod, before) {
				t.Errorf("a failed Inject changed the pod")
			}
		})
	}
}

func TestInjectNilPod(t *testing.T) {
	if err := Inject(nil, errorParams()); err == nil {
		t.Error("Inject(nil) = nil, want an error")
	}
}

func TestDerivedMemory(t *testing.T) {
	tests := map[string]struct {
		l1   int64
		want string
	}{
		"no L1 still leaves room for the runtime":        {0, "128Mi"},
		"a negative size counts as none":                 {-5, "128Mi"},
		"one byte rounds up to a whole Mi":               {1, "129Mi"},
		"256Mi of L1 needs 448Mi":                        {256 << 20, "448Mi"},
		"100Mi of L1 needs 253Mi":                        {100 << 20, "253Mi"},
		"a size just past a 4Mi step rounds up":          {4<<20 + 1, "134Mi"},
		"1Gi of L1 needs 1408Mi":                         {1 << 30, "1408Mi"},
		"the largest size saturates instead of wrapping": {math.MaxInt64, "9223372036854775807"},
		"8Gi of L1 needs 10368Mi":                        {8 << 30, "10368Mi"},
		"a size that is not a multiple of Mi rounds up":  {3*(1<<20) + 7, "132Mi"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := DerivedMemory(tc.l1)
			if want := resource.MustParse(tc.want); got.Cmp(want) != 0 {
				t.Errorf("DerivedMemory(%d) = %s, want %s", tc.l1, got.String(), tc.want)
			}
		})
	}
}

func TestGoMemoryLimit(t *testing.T) {
	tests := map[string]struct{ limit, want string }{
		"90% of 1Gi rounds down to 921Mi": {"1Gi", "921Mi"},
		"90% of 448Mi rounds down":        {"448Mi", "403Mi"},
		"a decimal limit is converted":    {"1G", "858Mi"},
		"a tiny limit still gives 1Mi":    {"1Ki", "1Mi"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := goMemoryLimit(resource.MustParse(tc.limit)); got != tc.want {
				t.Errorf("goMemoryLimit(%s) = %s, want %s", tc.limit, got, tc.want)
			}
		})
	}
}

// The container's derived memory holds the sidecar's automatic Go limit
// with room for the RSS that is not Go memory and for the live-heap
// headroom the sidecar adds above its floor: a container limit below what
// the Go runtime lets the heap reach gets the pod OOM-killed.
func TestDerivedMemoryStaysAboveTheSidecarsAutomaticLimit(t *testing.T) {
	tests := map[string]int64{
		"the smallest L1":            1 << 20,
		"the flood bench's 64Mi L1":  64 << 20,
		"the default 256Mi L1":       256 << 20,
		"an L1 that is not whole Mi": 100<<20 + 3,
		"a 16Gi L1":                  16 << 30,
	}
	for name, l1 := range tests {
		t.Run(name, func(t *testing.T) {
			derived := DerivedMemory(l1)
			goLimit := int64(tierconfig.AutoMemoryLimit(tierconfig.Size(l1)))
			if room := derived.Value() - goLimit; room < 64<<20+l1/4 {
				t.Errorf("DerivedMemory(%d) = %s leaves %d bytes above the automatic Go limit %d, want at least 64Mi + L1/4",
					l1, derived.String(), room, goLimit)
			}
		})
	}
}

func TestHTTP2Name(t *testing.T) {
	for name, want := range map[string]string{
		"grpc": "gRPC", "grpc-api": "gRPC", "GRPC": "gRPC", "grpc-web": "", "grpc-web-x": "",
		"http2": "HTTP/2", "http2-api": "HTTP/2", "h2c": "HTTP/2", "h2c-x": "HTTP/2",
		"http": "", "grpcx": "", "web": "", "": "",
	} {
		if got := http2Name(name); got != want {
			t.Errorf("http2Name(%q) = %q, want %q", name, got, want)
		}
	}
}
