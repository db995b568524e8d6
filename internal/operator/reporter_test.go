package operator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// TestReportWritesAreBoundedWhateverTheChurn: sidecars that connect and
// go all the time signal a change on every request; the replica still
// writes its report at most once per minGap, the report it leaves is the
// latest, and it is deleted when the replica stops.
func TestReportWritesAreBoundedWhateverTheChurn(t *testing.T) {
	c := needCluster(t)
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	real, err := client.NewWithWatch(cluster.cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	counting := interceptor.NewClient(real, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
	})

	// Every call sees one more sidecar: the churn.
	var mu sync.Mutex
	n := 0
	sidecars := func() map[string]controlplane.Sidecars {
		mu.Lock()
		defer mu.Unlock()
		n++
		return map[string]controlplane.Sidecars{"shop/web": {Connected: n, Applied: map[string]int{version('a'): n}}}
	}
	changed := make(chan struct{}, 1)
	const minGap = 500 * time.Millisecond
	rep := &sidecarReporter{
		c: counting, ns: operatorNS, replica: "churn-" + namespace(t, c),
		every: time.Hour, minGap: minGap, sidecars: sidecars, changed: changed,
		log: slog.New(slog.DiscardHandler), now: time.Now,
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.Start(ctx) }()

	const churn = 3 * time.Second
	start := time.Now()
	signals := 0
	for time.Since(start) < churn {
		select {
		case changed <- struct{}{}:
			signals++
		default:
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	// The first write, then at most one per minGap.
	limit := int64(elapsed/minGap) + 2
	if got := writes.Load(); got > limit || got < 3 {
		t.Errorf("%d report writes for %d change signals in %s, want between 3 and %d (one per %s)", got, signals, elapsed.Round(time.Millisecond), limit, minGap)
	}

	// The last signal is written within minGap.
	var lease coordinationv1.Lease
	eventually(t, 5*time.Second, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: operatorNS, Name: rep.leaseName()}, &lease); err != nil {
			return err
		}
		r, err := decodeReport(lease.Annotations[annotationSidecars])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		// The report was built by one of the last calls.
		if got := r.Tiers["shop/web"].Connected; got < n-1 {
			return fmt.Errorf("the report says %d connected, the last call %d", got, n)
		}
		return nil
	})
	if lease.Labels[labelConnectedReport] != "true" || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil ||
		*lease.Spec.LeaseDurationSeconds != int32(reportExpiry*time.Hour/time.Second) {
		t.Errorf("report Lease %+v %+v: want the report label, a renewal and a duration of %d periods", lease.Labels, lease.Spec, reportExpiry)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&lease), &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the report of a stopped replica is still there (%v)", err)
	}
}
