package operator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
)

// A tier's Secrets reach its sidecars as one projected volume built at
// admission (inject.SecretsVolumeName). The kubelet follows a rotation of
// a Secret's content, but a pod's volumes cannot change: when the tier
// names another Secret (or key) the running pods keep reading the old
// one until they are restarted. Pushing the new values over xDS would put
// secret values on the wire, which the control plane never carries
// (render's package comment), and a sidecar reading Secrets itself would
// need Secret access in every app namespace. So, as Istio does for a
// changed injection template, the operator leaves the pods alone and says
// in Ready which pods must be restarted and why (RestartRequired).

// podRestart is a pod that must be restarted to use the Secrets its tier
// names now, and the fields whose Secret it lacks.
type podRestart struct {
	Pod    string
	Fields []string
}

// maxRestartNames bounds the pods a RestartRequired message names.
const maxRestartNames = 10

// fieldOfFile names the CacheTier field a secret file comes from.
var fieldOfFile = map[string]string{
	inject.FileRedisPassword:   "spec.l2.passwordSecretRef",
	inject.FileRedisCACert:     "spec.l2.tls.caSecretRef",
	inject.FilePurgeToken:      "spec.purge.tokenSecretRef",
	inject.FileInvalidationKey: "the generated Secret <tier>" + inject.GeneratedSecretSuffix,
}

// secretFilesToProject are the secret files the webhook projects into a pod
// admitted now: each referenced one that resolved (versions, by file: see
// render.SecretVersions), and the generated Secret's, which the kubelet
// waits for.
func secretFilesToProject(t *v1alpha1.CacheTier, versions map[string]string) []render.SecretFile {
	var out []render.SecretFile
	for _, f := range render.SecretFiles(t) {
		if _, ok := versions[f.File]; ok || f.Generated() {
			out = append(out, f)
		}
	}
	return out
}

// podSecretFiles reads the secret files back from a pod's projected
// volume, by file name.
func podSecretFiles(p *corev1.Pod) map[string]inject.SecretFile {
	out := map[string]inject.SecretFile{}
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		if v.Name != inject.SecretsVolumeName || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret == nil {
				continue
			}
			for _, it := range src.Secret.Items {
				out[it.Path] = inject.SecretFile{File: it.Path, Secret: src.Secret.Name, Key: it.Key}
			}
		}
	}
	return out
}

// restartsNeeded lists the injected pods (sorted by name) whose secrets
// volume differs from what the tier would project now (want): another
// Secret or key for a file, a file more or less.
func restartsNeeded(pods []*corev1.Pod, want []render.SecretFile) []podRestart {
	wanted := make(map[string]render.SecretFile, len(want))
	for _, f := range want {
		wanted[f.File] = f
	}
	var out []podRestart
	for _, p := range pods {
		if p.Annotations[inject.AnnotationInjected] != "true" {
			continue
		}
		have := podSecretFiles(p)
		var fields []string
		for _, file := range slices.Sorted(maps.Keys(fieldOfFile)) {
			w, inWant := wanted[file]
			h, inHave := have[file]
			if inWant != inHave || (inWant && (w.Secret != h.Secret || w.Key != h.Key)) {
				fields = append(fields, fieldOfFile[file])
			}
		}
		if len(fields) > 0 {
			out = append(out, podRestart{Pod: p.Name, Fields: fields})
		}
	}
	slices.SortFunc(out, func(a, b podRestart) int { return strings.Compare(a.Pod, b.Pod) })
	return out
}

// restartMessage is Ready's message for RestartRequired.
func restartMessage(restart []podRestart, pods int32) string {
	fields := map[string]bool{}
	names := make([]string, 0, min(len(restart), maxRestartNames))
	for i, r := range restart {
		for _, f := range r.Fields {
			fields[f] = true
		}
		if i < maxRestartNames {
			names = append(names, r.Pod)
		}
	}
	list := strings.Join(names, ", ")
	if more := len(restart) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%d of %d injected pods were admitted with other Secrets than the tier names now (%s): a pod's volumes are fixed at admission, so they keep using the old ones until restarted; restart them (kubectl rollout restart their workload): %s",
		len(restart), pods, strings.Join(slices.Sorted(maps.Keys(fields)), ", "), list)
}
