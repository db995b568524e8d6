package inject

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// FuzzInject feeds arbitrary pods and sidecar ports to Inject. It must never
// panic; a failure must leave the pod untouched; a success must produce a
// pod that InjectRequired declines and that a second Inject leaves as is.
func FuzzInject(f *testing.F) {
	for _, name := range goldenCases(f) {
		data, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "", int32(0), int32(0), int64(256<<20))
	}
	f.Add([]byte("spec:\n  containers:\n  - name: a\n    ports:\n    - containerPort: 15180\n"), "15180", int32(0), int32(0), int64(0))
	f.Add([]byte("metadata:\n  annotations:\n    tiercache.io/port: x\n"), "x", int32(80), int32(80), int64(-1))

	f.Fuzz(func(t *testing.T, data []byte, port string, sidecarPort, adminPort int32, l1 int64) {
		var pod corev1.Pod
		if err := yaml.Unmarshal(data, &pod); err != nil {
			return
		}
		if port != "" {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[AnnotationPort] = port
		}
		InjectRequired(&pod, "shop", []string{"kube-system"})
		p := Params{Tier: "fuzz", Image: "sidecar:fuzz", Port: sidecarPort, AdminPort: adminPort, L1MaxSize: l1}
		wasInjected := injected(&pod)
		before := pod.DeepCopy()

		if err := Inject(&pod, p); err != nil {
			if !reflect.DeepEqual(&pod, before) {
				t.Fatalf("Inject failed (%v) and changed the pod", err)
			}
			return
		}
		if wasInjected {
			if !reflect.DeepEqual(&pod, before) {
				t.Fatal("Inject changed an already injected pod")
			}
			return
		}
		at := sidecarIndex(before.Spec.InitContainers)
		if len(pod.Spec.InitContainers) <= at || pod.Spec.InitContainers[at].Name != ContainerName {
			t.Fatal("the sidecar is not the first init container after the mesh's")
		}
		if pod.Labels[LabelTier] != p.Tier || pod.Annotations[AnnotationInjected] != "true" {
			t.Fatal("the injected pod lacks its tier label or injected annotation")
		}
		if ok, _ := InjectRequired(&pod, "shop", nil); ok {
			t.Fatal("InjectRequired wants to inject an injected pod")
		}
		after := pod.DeepCopy()
		if err := Inject(&pod, p); err != nil || !reflect.DeepEqual(&pod, after) {
			t.Fatalf("re-injection was not a no-op (err %v)", err)
		}
	})
}
