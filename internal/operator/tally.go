package operator

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// statusVersions bounds status.sidecars.versions (the CRD says 8).
const statusVersions = 8

// unknownVersion stands in status for a sidecar that named no version.
const unknownVersion = "unknown"

// sidecarTally is one tier's sidecars added up over the replicas'
// reports.
type sidecarTally struct {
	// Replicas counts the reports added up (whether or not they name the
	// tier).
	Replicas  int
	Connected int
	Applied   map[string]int
	Rejected  map[string]int
	NACKs     uint64
	LastNACK  *nackReport
}

// add counts one replica's report of the tier.
func (t *sidecarTally) add(r tierReport) {
	t.Connected += r.Connected
	for v, n := range r.Applied {
		if t.Applied == nil {
			t.Applied = map[string]int{}
		}
		t.Applied[v] += n
	}
	for v, n := range r.Rejected {
		if t.Rejected == nil {
			t.Rejected = map[string]int{}
		}
		t.Rejected[v] += n
	}
	t.NACKs += r.NACKs
	if r.LastNACK != nil && (t.LastNACK == nil || r.LastNACK.At.After(t.LastNACK.At)) {
		t.LastNACK = r.LastNACK
	}
}

// sidecarCounts classifies the tally against the tier's current version:
// a sidecar that holds it is current; one whose latest answer refused it
// is rejected; any other is behind. Each sidecar is in exactly one: a
// refusal is reported only for a sidecar that does not hold the version
// it refused.
func sidecarCounts(t sidecarTally, configHash string) v1alpha1.SidecarCounts {
	cur := short(configHash)
	c := v1alpha1.SidecarCounts{Total: int32(t.Connected), Replicas: int32(t.Replicas)}
	if cur != "" {
		c.Current = int32(t.Applied[cur])
		c.Rejected = int32(t.Rejected[cur])
	}
	// Reports are bounded and replicas report at their own pace: never
	// let the parts exceed the whole.
	c.Current = min(c.Current, c.Total)
	c.Rejected = min(c.Rejected, c.Total-c.Current)
	c.Behind = c.Total - c.Current - c.Rejected
	versions := slices.SortedFunc(maps.Keys(t.Applied), func(a, b string) int {
		return cmp.Or(cmp.Compare(t.Applied[b], t.Applied[a]), cmp.Compare(a, b))
	})
	for _, v := range versions {
		if len(c.Versions) == statusVersions {
			break
		}
		if t.Applied[v] <= 0 {
			continue
		}
		name := v
		if name == "" {
			name = unknownVersion
		}
		c.Versions = append(c.Versions, v1alpha1.VersionCount{Version: name, Sidecars: int32(t.Applied[v])})
	}
	return c
}

// readiness is the Ready condition of a tier whose config is published:
// True when every injected pod (pods) has a connected sidecar, every
// connected sidecar applied the current version and no pod must be
// restarted to use the tier's Secrets; or when the tier has no pod (as a
// Deployment scaled to 0 is Available: nothing to wait for, and a pod
// admitted later gets the current version). Otherwise False, with the
// counts. The counts are numbers, not names: a sidecar still connected
// from a pod that is leaving counts for one that is not connected yet,
// for as long as it drains.
func readiness(c v1alpha1.SidecarCounts, pods int32, restart []podRestart, configHash, lastNACK string) (metav1.ConditionStatus, string, string) {
	v := short(configHash)
	switch {
	case c.Rejected > 0:
		msg := fmt.Sprintf("%d of %d connected sidecars refused config version %s and keep their last good config; %d applied it, %d run an older one",
			c.Rejected, c.Total, v, c.Current, c.Behind)
		if lastNACK != "" {
			msg += "; last refusal: " + lastNACK
		}
		return metav1.ConditionFalse, v1alpha1.ReasonConfigRejected, msg
	case len(restart) > 0:
		return metav1.ConditionFalse, v1alpha1.ReasonRestartRequired, restartMessage(restart, pods)
	case c.Total < pods:
		return metav1.ConditionFalse, v1alpha1.ReasonSidecarsNotConnected,
			fmt.Sprintf("%d of %d injected pods have a sidecar connected to the control plane (%d applied config version %s, %d run an older one); the others are starting or cannot reach the control plane: see their sidecars' tiercache_control_plane_connected and logs",
				c.Total, pods, c.Current, v, c.Behind)
	case c.Behind > 0:
		return metav1.ConditionFalse, v1alpha1.ReasonSidecarsBehind,
			fmt.Sprintf("%d of %d connected sidecars applied config version %s; %d still run an older one", c.Current, c.Total, v, c.Behind)
	case pods == 0:
		return metav1.ConditionTrue, v1alpha1.ReasonNoPods,
			fmt.Sprintf("config version %s is published; no pod is injected for this tier", v)
	default:
		return metav1.ConditionTrue, v1alpha1.ReasonApplied,
			fmt.Sprintf("all %d injected pods have a connected sidecar that applied config version %s", pods, v)
	}
}
