package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// TestConnectedSidecarsAreSummedAcrossReplicas runs a second operator
// replica beside the suite's (it does not lead: the suite's holds the
// Lease), connects one sidecar to each, and expects the status written by
// the leader to count both; when the second replica stops, its sidecar
// no longer counts.
func TestConnectedSidecarsAreSummedAcrossReplicas(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	if err := c.Create(ctx, newTier(ns, "shared", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer origin.Close()

	wo := cluster.env.WebhookInstallOptions
	secondXDS := freeAddr(t)
	opCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunWith(opCtx, []string{
			"--namespace=" + operatorNS,
			"--replica-name=second",
			"--cert-mode=external",
			"--webhook-host=127.0.0.1",
			"--webhook-port=" + strconv.Itoa(freePort(t)),
			"--webhook-cert-dir=" + wo.LocalServingCertDir,
			"--metrics-bind-address=0",
			"--health-probe-bind-address=127.0.0.1:0",
			"--xds-listen=" + secondXDS,
			"--xds-ca-file=" + cluster.caFile,
			"--status-refresh=1s",
		}, Env{Getenv: func(string) string { return "" }, Stderr: logSink(), RestConfig: cluster.cfg, SkipNameValidation: true, Registerer: prometheus.NewRegistry()})
	}()
	stopped := false
	stopSecond := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("second operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the second operator did not stop within 30s")
		}
	}
	t.Cleanup(stopSecond)

	startSidecar(t, origin.URL, ns, "shared", "web-0", cluster.xdsAddr)
	startSidecar(t, origin.URL, ns, "shared", "web-1", secondXDS)

	connected := func(want int32) func() error {
		return func() error {
			var tier v1alpha1.CacheTier
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, &tier); err != nil {
				return err
			}
			if tier.Status.ConnectedSidecars != want {
				return fmt.Errorf("connectedSidecars = %d, want %d", tier.Status.ConnectedSidecars, want)
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, connected(2))
	// The second replica stops (its report goes with it): only the
	// leader's sidecar counts.
	stopSecond()
	eventually(t, 30*time.Second, connected(1))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}
