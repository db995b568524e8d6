package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Sidecars connect to whichever operator replica the xDS Service picks,
// so no replica sees them all. Each replica reports its own per-tier
// counts in a Lease of its own in the operator's namespace (renewed every
// refresh period, deleted when it stops), and the leader sums the fresh
// reports into status.connectedSidecars. A replica that died without
// deleting its Lease stops counting once the report is three periods
// old.
const (
	labelConnectedReport = "tiercache.io/connected-report"
	annotationConnected  = "tiercache.io/connected"
	connectedLeasePrefix = "tiercache-connected-"
)

// connectedReporter writes this replica's counts.
type connectedReporter struct {
	c       client.Client // writes
	r       client.Reader // uncached reads: the cache would watch every Lease of the cluster
	ns      string
	replica string
	every   time.Duration
	counts  func() map[string]int
	log     *slog.Logger
}

func (r *connectedReporter) NeedLeaderElection() bool { return false }

// Start reports every period until ctx ends, then deletes the report.
func (r *connectedReporter) Start(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		if err := r.report(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("reporting connected sidecars", "err", err)
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: connectedLeasePrefix + r.replica}}
			if err := r.c.Delete(dctx, lease); err != nil && !apierrors.IsNotFound(err) {
				r.log.Warn("deleting the connected-sidecars report", "err", err)
			}
			return nil
		case <-t.C:
		}
	}
}

func (r *connectedReporter) report(ctx context.Context) error {
	js, err := json.Marshal(r.counts())
	if err != nil {
		return err
	}
	now := metav1.NewMicroTime(time.Now())
	var lease coordinationv1.Lease
	key := client.ObjectKey{Namespace: r.ns, Name: connectedLeasePrefix + r.replica}
	err = r.r.Get(ctx, key, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: key.Name,
				Labels:      map[string]string{labelConnectedReport: "true"},
				Annotations: map[string]string{annotationConnected: string(js)}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.replica), RenewTime: &now},
		}
		return r.c.Create(ctx, &lease)
	}
	if err != nil {
		return err
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[annotationConnected] = string(js)
	lease.Spec.RenewTime = &now
	return r.c.Update(ctx, &lease)
}

// connectedTotals sums the replicas' fresh reports. It lists the reports
// at most once per half period, whatever the number of tiers.
type connectedTotals struct {
	r     client.Reader
	ns    string
	every time.Duration

	mu     sync.Mutex
	at     time.Time
	totals map[string]int
}

// Connected returns the number of sidecars of tier key connected to any
// replica.
func (t *connectedTotals) Connected(ctx context.Context, key string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.totals == nil || now.Sub(t.at) >= t.every/2 {
		totals, err := t.sum(ctx, now)
		if err != nil {
			return 0, err
		}
		t.totals, t.at = totals, now
	}
	return t.totals[key], nil
}

func (t *connectedTotals) sum(ctx context.Context, now time.Time) (map[string]int, error) {
	var leases coordinationv1.LeaseList
	if err := t.r.List(ctx, &leases, client.InNamespace(t.ns), client.MatchingLabels{labelConnectedReport: "true"}); err != nil {
		return nil, fmt.Errorf("listing connected-sidecar reports: %w", err)
	}
	totals := map[string]int{}
	for _, l := range leases.Items {
		if l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) > 3*t.every {
			continue // a replica that died without deleting its report
		}
		var counts map[string]int
		if err := json.Unmarshal([]byte(l.Annotations[annotationConnected]), &counts); err != nil {
			continue
		}
		for k, v := range counts {
			totals[k] += v
		}
	}
	return totals, nil
}
