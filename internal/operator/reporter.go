package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// reportExpiry is how many report periods a report counts for: a
// replica that died without deleting its Lease stops counting then.
const reportExpiry = 3

// sidecarReporter writes this replica's report (report.go) into its
// Lease: every period, to renew it, and early when the control plane
// signals a change, but never twice within minGap. So a replica writes at
// most once per minGap whatever its sidecars do (default: every 3s at
// most, every 30s at least), and the leader hears of an ACK or a NACK
// within about minGap.
//
// The report is owned by the replica's Pod (found by name: the replica
// name is the pod name unless --replica-name says otherwise), so that the
// garbage collector deletes it with the pod even when the replica could
// not: `helm uninstall` deletes the operator's RBAC while its pods are
// still stopping, and a report left behind would count its sidecars
// beside the next install's until it expired.
type sidecarReporter struct {
	c client.Client // writes; it never reads Leases
	// pods reads this replica's Pod (an uncached reader: the manager's
	// cache holds injected pods only); nil: the report has no owner.
	pods    client.Reader
	ns      string
	replica string
	every   time.Duration
	minGap  time.Duration
	// sidecars is the control plane's view; changed signals that it
	// changed (a channel with room for one: signals coalesce).
	sidecars func() map[string]controlplane.Sidecars
	changed  <-chan struct{}
	log      *slog.Logger
	now      func() time.Time

	// owner is the report's owner reference once looked up (nil: none);
	// ownerKnown says the lookup is done.
	owner      *metav1.OwnerReference
	ownerKnown bool
}

// lookUpOwner finds this replica's Pod, once: none when it does not
// exist (an operator run outside a pod), again at the next write after
// another error.
func (r *sidecarReporter) lookUpOwner(ctx context.Context) {
	if r.ownerKnown || r.pods == nil {
		return
	}
	var pod corev1.Pod
	err := r.pods.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: r.replica}, &pod)
	switch {
	case err == nil:
		r.owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
		r.ownerKnown = true
	case apierrors.IsNotFound(err):
		r.ownerKnown = true
	default:
		if ctx.Err() == nil {
			r.log.Warn("looking up this replica's pod, the owner of its sidecar report", "pod", r.ns+"/"+r.replica, "err", err)
		}
	}
}

func (r *sidecarReporter) NeedLeaderElection() bool { return false }

func (r *sidecarReporter) leaseName() string { return connectedLeasePrefix + r.replica }

// Start reports until ctx ends, then deletes the report.
func (r *sidecarReporter) Start(ctx context.Context) error {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	// gap fires when a change waits for minGap to pass; nil when none
	// waits.
	var gap *time.Timer
	var gapC <-chan time.Time
	var last []byte
	var lastAt time.Time
	var lastOmitted int
	write := func(force bool) {
		body, omitted, err := encodeReport(r.sidecars(), maxReportBytes)
		if err == nil && !force && bytes.Equal(body, last) {
			return
		}
		if omitted != lastOmitted {
			lastOmitted = omitted
			if omitted > 0 {
				r.log.Warn("the sidecar report leaves tiers out: it would not fit in its Lease; their sidecars on this replica are not counted", "omitted", omitted, "lease", r.ns+"/"+r.leaseName())
			}
		}
		if err == nil {
			err = r.write(ctx, body)
		}
		lastAt = r.now()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("writing the sidecar report", "lease", r.ns+"/"+r.leaseName(), "err", err)
			}
			last = nil // written again at the next signal or tick
			return
		}
		last = body
	}
	write(true)
	for {
		select {
		case <-ctx.Done():
			if gap != nil {
				gap.Stop()
			}
			r.remove(ctx)
			return nil
		case <-tick.C:
			write(true)
		case <-r.changed:
			if gapC != nil {
				continue // a write is already due
			}
			if wait := r.minGap - r.now().Sub(lastAt); wait > 0 {
				gap = time.NewTimer(wait)
				gapC = gap.C
				continue
			}
			write(false)
		case <-gapC:
			gap, gapC = nil, nil
			write(false)
		}
	}
}

// write puts body into the replica's Lease (one merge patch; a create
// when the Lease does not exist) and renews it.
func (r *sidecarReporter) write(ctx context.Context, body []byte) error {
	r.lookUpOwner(ctx)
	now := metav1.NewMicroTime(r.now())
	duration := int32(min(math.Ceil((reportExpiry * r.every).Seconds()), math.MaxInt32))
	metadata := map[string]any{
		"labels":      map[string]string{labelConnectedReport: "true"},
		"annotations": map[string]any{annotationSidecars: string(body), annotationConnected: nil},
	}
	var owners []metav1.OwnerReference
	if r.owner != nil {
		owners = []metav1.OwnerReference{*r.owner}
		metadata["ownerReferences"] = owners
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": metadata,
		"spec":     map[string]any{"holderIdentity": r.replica, "renewTime": now, "leaseDurationSeconds": duration},
	})
	if err != nil {
		return err
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.leaseName()}}
	err = r.c.Patch(ctx, lease, client.RawPatch(types.MergePatchType, patch))
	if !apierrors.IsNotFound(err) {
		return err
	}
	lease = &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.leaseName(),
			Labels:          map[string]string{labelConnectedReport: "true"},
			Annotations:     map[string]string{annotationSidecars: string(body)},
			OwnerReferences: owners},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.replica), RenewTime: &now, LeaseDurationSeconds: &duration},
	}
	if err := r.c.Create(ctx, lease); err != nil {
		return fmt.Errorf("creating the report: %w", err)
	}
	return nil
}

// remove deletes the report of a replica that stops: its sidecars
// reconnect to another replica, which reports them.
func (r *sidecarReporter) remove(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.leaseName()}}
	if err := r.c.Delete(dctx, lease); err != nil && !apierrors.IsNotFound(err) {
		r.log.Warn("deleting the sidecar report", "lease", r.ns+"/"+r.leaseName(), "err", err)
	}
}
