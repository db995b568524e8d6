package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// sidecarReports is the leader's side of the replicas' reports: it reads
// them from the manager's cache (which holds only the labelled Leases of
// the operator's namespace), parses each version of a report once, adds
// up the live ones for a tier, maps a report's changes to the tiers they
// touch, and deletes expired ones. Nothing of it is kept across a leader
// change: a new leader reads the same reports.
type sidecarReports struct {
	c  client.Reader // the manager's cache
	w  client.Writer // deletes expired reports
	ns string
	// every is this operator's report period: the expiry of a report
	// that does not say its own (leaseDurationSeconds).
	every time.Duration
	now   func() time.Time
	log   *slog.Logger
	// pods reads the operator pods that own reports (uncached); nil:
	// reports are deleted on expiry only.
	pods client.Reader

	mu     sync.Mutex
	parsed map[types.UID]parsedReport
}

type parsedReport struct {
	resourceVersion string
	rep             sidecarReport
	err             error
}

func newSidecarReports(c client.Reader, w client.Writer, ns string, every time.Duration, log *slog.Logger) *sidecarReports {
	return &sidecarReports{c: c, w: w, ns: ns, every: every, now: time.Now, log: log, parsed: map[types.UID]parsedReport{}}
}

// list returns the report Leases (the cache's own objects: read only).
func (s *sidecarReports) list(ctx context.Context) ([]coordinationv1.Lease, error) {
	var leases coordinationv1.LeaseList
	if err := s.c.List(ctx, &leases, client.InNamespace(s.ns), client.MatchingLabels{labelConnectedReport: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the sidecar reports: %w", err)
	}
	return leases.Items, nil
}

// expired reports whether a report is older than its own lease duration
// (or reportExpiry periods when it names none): its replica is gone or
// cannot reach the API server, and its sidecars have reconnected
// elsewhere.
func (s *sidecarReports) expired(l *coordinationv1.Lease, now time.Time) bool {
	return l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) > s.duration(l)
}

// duration is how long a report counts after its renewal.
func (s *sidecarReports) duration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return reportExpiry * s.every
}

// report parses a Lease's report, once per resourceVersion.
func (s *sidecarReports) report(l *coordinationv1.Lease) (sidecarReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.parsed[l.UID]; ok && p.resourceVersion == l.ResourceVersion {
		return p.rep, p.err
	}
	rep, err := decodeReport(l.Annotations[annotationSidecars])
	s.parsed[l.UID] = parsedReport{resourceVersion: l.ResourceVersion, rep: rep, err: err}
	return rep, err
}

// Tally adds up the live reports' view of tier key.
func (s *sidecarReports) Tally(ctx context.Context, key string) (sidecarTally, error) {
	leases, err := s.list(ctx)
	if err != nil {
		return sidecarTally{}, err
	}
	now := s.now()
	var t sidecarTally
	live := make(map[types.UID]bool, len(leases))
	for i := range leases {
		l := &leases[i]
		if s.expired(l, now) {
			continue
		}
		rep, err := s.report(l)
		if err != nil {
			// An older replica's report (during an upgrade), or a
			// broken one: its sidecars are not counted.
			continue
		}
		live[l.UID] = true
		t.Replicas++
		if tr, ok := rep.Tiers[key]; ok {
			t.add(tr)
		}
	}
	s.forget(live)
	return t, nil
}

// forget drops the parsed reports of Leases that are gone or expired.
func (s *sidecarReports) forget(keep map[types.UID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.parsed {
		if !keep[uid] {
			delete(s.parsed, uid)
		}
	}
}

// handler enqueues the tiers whose entry a report change touches (all
// of a report's tiers when it appears or goes), so that a report written
// every period does not reconcile every tier every period.
func (s *sidecarReports) handler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	tiers := func(o client.Object) map[string]tierReport {
		l, ok := o.(*coordinationv1.Lease)
		if !ok {
			return nil
		}
		rep, err := s.report(l)
		if err != nil {
			return nil
		}
		return rep.Tiers
	}
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], keys map[string]tierReport, unless map[string]tierReport) {
		for key, tr := range keys {
			if old, ok := unless[key]; ok && sameTierReport(old, tr) {
				continue
			}
			if req, ok := tierRequest(key); ok {
				q.Add(req)
			}
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, tiers(e.Object), nil)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, after := tiers(e.ObjectOld), tiers(e.ObjectNew)
			enqueue(q, after, before)
			enqueue(q, before, after)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, tiers(e.Object), nil)
		},
	}
}

func sameTierReport(a, b tierReport) bool {
	return a.Connected == b.Connected && a.NACKs == b.NACKs && mapsEqual(a.Applied, b.Applied) && mapsEqual(a.Rejected, b.Rejected)
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// tierRequest is the reconcile request of a "<namespace>/<tier>" key.
func tierRequest(key string) (reconcile.Request, bool) {
	if controlplane.ValidateTierKey(key) != nil {
		return reconcile.Request{}, false
	}
	ns, name, _ := strings.Cut(key, "/")
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}, true
}

// reportJanitor deletes expired reports (leader only): a replica that
// died leaves its Lease behind, and replicas of a Deployment get new
// names. It waits another lease duration after the expiry (a report that
// expired does not count meanwhile), so that a replica cut off from the
// API server for a while finds its Lease again. A report whose owner pod
// is gone it deletes at once, expired or not: the garbage collector does
// the same, but a cluster's collector may lag, and without this a report
// left behind by an uninstall counts its sidecars for a lease duration
// beside the next install's.
type reportJanitor struct{ s *sidecarReports }

func (j reportJanitor) NeedLeaderElection() bool { return true }

func (j reportJanitor) Start(ctx context.Context) error {
	t := time.NewTicker(j.s.every)
	defer t.Stop()
	for {
		if err := j.sweep(ctx); err != nil && ctx.Err() == nil {
			j.s.log.Warn("deleting expired sidecar reports", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (j reportJanitor) sweep(ctx context.Context) error {
	leases, err := j.s.list(ctx)
	if err != nil {
		return err
	}
	now := j.s.now()
	var errs []error
	for i := range leases {
		l := &leases[i]
		why := "expired"
		if !j.s.expired(l, now.Add(-j.s.duration(l))) {
			gone, err := j.ownerGone(ctx, l)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !gone {
				continue
			}
			why = "its operator pod is gone"
		}
		// Only the version seen expired: a replica that came back and
		// renewed it keeps it.
		stale := &coordinationv1.Lease{}
		stale.Namespace, stale.Name = l.Namespace, l.Name
		err := j.s.w.Delete(ctx, stale, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
		switch {
		case err == nil:
			j.s.log.Info("deleted a sidecar report", "why", why, "lease", l.Namespace+"/"+l.Name, "renewed", l.Spec.RenewTime)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownerGone reports whether the report is owned by an operator Pod that
// no longer exists (by name and UID).
func (j reportJanitor) ownerGone(ctx context.Context, l *coordinationv1.Lease) (bool, error) {
	if j.s.pods == nil {
		return false, nil
	}
	for _, o := range l.OwnerReferences {
		if o.APIVersion != "v1" || o.Kind != "Pod" {
			continue
		}
		var pod corev1.Pod
		err := j.s.pods.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: o.Name}, &pod)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("reading the owner of sidecar report %s: %w", l.Name, err)
		case pod.UID != o.UID:
			return true, nil
		}
	}
	return false, nil
}
