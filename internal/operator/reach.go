package operator

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// Two things that silently defeat the cache and that only the pods show:
// an L1-only tier with several replicas and no control plane, where
// purges and invalidations reach one pod, and pods that run another
// sidecar image than the tier's.

// purgesReach is the PurgesReachEveryPod condition of a tier with or
// without L2 and pods live pods; relay: the operator serves the control
// plane, whose invalidation relay carries an L1-only tier's purges to
// every pod.
func purgesReach(hasL2, relay bool, pods int) (metav1.ConditionStatus, string, string) {
	switch {
	case hasL2:
		return metav1.ConditionTrue, v1alpha1.ReasonThroughL2, "purges and invalidations reach every pod through L2's invalidation channel"
	case pods <= 1:
		return metav1.ConditionTrue, v1alpha1.ReasonAtMostOnePod, fmt.Sprintf("%d pod caches for this tier, in L1 only", pods)
	case relay:
		return metav1.ConditionTrue, v1alpha1.ReasonThroughRelay, fmt.Sprintf(
			"%d pods cache in L1 only (no spec.l2); purges and invalidations reach every pod through the operator's invalidation relay (its control plane)", pods)
	}
	return metav1.ConditionFalse, v1alpha1.ReasonL1OnlyReplicas, fmt.Sprintf(
		"%d pods cache in L1 only (no spec.l2) and the operator runs without its control plane (--xds-listen): a PURGE through a Service, "+
			"an application's POST /purge and the invalidation by an unsafe method each reach only the pod that receives them, the others keep "+
			"serving what was purged; kubectl tiercache purge reaches every pod. Enable the control plane, or set spec.l2, for purges that reach every replica", pods)
}

// sidecarImages is the SidecarImagesMatch condition: want is the image
// the tier's pods are injected with now.
func sidecarImages(want string, pods []*corev1.Pod) (metav1.ConditionStatus, string, string) {
	others := map[string]int{}
	n := 0
	for _, p := range pods {
		for _, c := range p.Spec.InitContainers {
			if c.Name != inject.ContainerName {
				continue
			}
			if c.Image != want {
				others[c.Image]++
				n++
			}
		}
	}
	if n == 0 {
		return metav1.ConditionTrue, v1alpha1.ReasonTierImage, "every injected pod runs the sidecar image " + want
	}
	images := make([]string, 0, len(others))
	for img := range others {
		images = append(images, img)
	}
	sort.Strings(images)
	for i, img := range images {
		images[i] = fmt.Sprintf("%s (%d)", img, others[img])
	}
	return metav1.ConditionFalse, v1alpha1.ReasonOtherImages, fmt.Sprintf(
		"%d of %d injected pods run another sidecar image than %s: %s; a pod's image is fixed at admission, so they change when re-created (kubectl rollout restart)",
		n, len(pods), want, strings.Join(images, ", "))
}
