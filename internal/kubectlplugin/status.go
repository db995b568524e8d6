package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

const (
	// metricsTimeout bounds the read of one sidecar's metrics.
	metricsTimeout = 10 * time.Second
	// parallelReads is how many sidecars' metrics are read at once.
	parallelReads = 8
)

// Config states of a sidecar, against the tier's status.configHash.
const (
	configCurrent = "current"
	configBehind  = "behind"
	configUnknown = "unknown"
)

func (r *runner) statusCommand() *cobra.Command {
	var addresses []string
	var output *string
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "status [TIER]",
		Short: "The tier's status and, per pod, config version, hit ratio and L2 state",
		Long: `status prints the CacheTier's status (conditions, config hash, injected and
connected sidecars, how many of those run the current config, are behind or
rejected it, and the versions they run, as the operator counted them; NACKs) and, for every pod labelled or annotated for the tier,
what its sidecar's metrics say: the config version in effect (current or behind
the tier's), the hit ratio since the sidecar started (hits and stale hits over all
requests), L2 (off, ok, circuit open; errors and dropped writes) and the control
plane connection.

Metrics are read through the API server's pod proxy (you need get on pods/proxy).
A pod whose metrics cannot be read is listed as such. --address reads the
metrics of these admin addresses (host:port) instead of the pods'.

Without TIER, status prints one line per CacheTier of the namespace (with
-A, of every namespace): Ready and its reason, and the counts of the
tier's status, from one list of CacheTiers (no pod is read).`,
		Example: `  kubectl tiercache status web -n shop
  kubectl tiercache status web -n shop -o json
  kubectl tiercache status -A`,
		Args: maxArgs("TIER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			if len(args) == 0 || allNamespaces {
				if len(args) > 0 {
					return usagef("status: -A lists every tier; it takes no TIER (got %q)", args[0])
				}
				if len(addresses) > 0 {
					return usagef("status: --address reads one tier's sidecars; name the TIER")
				}
				return r.statusTiers(cmd.Context(), allNamespaces, *output)
			}
			for _, a := range addresses {
				if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
					return usagef("--address: must be host:port, e.g. 127.0.0.1:9090 (got %q)", a)
				}
			}
			rep, err := r.status(cmd.Context(), args[0], addresses)
			if err != nil {
				return err
			}
			return r.printStatus(rep, *output)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list every CacheTier of every namespace, one line each")
	cmd.Flags().StringArrayVar(&addresses, "address", nil, "read the metrics of this admin address (host:port) instead of the tier's pods; repeatable")
	output = outputFlag(cmd)
	return cmd
}

// statusReport is the output of status.
type statusReport struct {
	Tier               string             `json:"tier"`
	Generation         int64              `json:"generation"`
	ObservedGeneration int64              `json:"observedGeneration"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ConfigHash         string             `json:"configHash,omitempty"`
	L2Mode             string             `json:"l2Mode,omitempty"`
	InjectedPods       int32              `json:"injectedPods"`
	ConnectedSidecars  int32              `json:"connectedSidecars"`
	// SidecarCounts are the tier's status.sidecars: its connected
	// sidecars by the config they run, as the operator counted them.
	SidecarCounts *v1alpha1.SidecarCounts `json:"sidecarCounts,omitempty"`
	NACKs         int64                   `json:"nacks,omitempty"`
	LastNACK      string                  `json:"lastNACK,omitempty"`
	Sidecars      []sidecarStatus         `json:"sidecars"`
}

// sidecarStatus is one pod's (or --address's) line.
type sidecarStatus struct {
	Name string `json:"name"`
	// Ready is the pod's Ready condition (pods only).
	Ready *bool `json:"ready,omitempty"`
	// State says why a pod has no sidecar to read: not injected, pending,
	// terminating...
	State string `json:"state,omitempty"`
	// Error says why its metrics could not be read.
	Error string `json:"error,omitempty"`
	// Config is current, behind or unknown; Version the sidecar's.
	Config  string `json:"config,omitempty"`
	Version string `json:"version,omitempty"`
	// HitRatio is hits (fresh and stale) over all requests since the
	// sidecar started; absent before the first request.
	HitRatio *float64 `json:"hitRatio,omitempty"`
	Requests float64  `json:"requests"`
	// L2 is "off" (the tier has none), "ok" or "circuit open".
	L2              string  `json:"l2,omitempty"`
	L2Errors        float64 `json:"l2Errors,omitempty"`
	L2DroppedWrites float64 `json:"l2DroppedWrites,omitempty"`
	// ControlPlane is connected or disconnected; empty for a sidecar
	// without one.
	ControlPlane string  `json:"controlPlane,omitempty"`
	NACKs        float64 `json:"nacks,omitempty"`
	read         bool
}

func (r *runner) status(ctx context.Context, tierName string, addresses []string) (*statusReport, error) {
	k, err := r.cluster()
	if err != nil {
		return nil, err
	}
	tier, err := k.tier(ctx, tierName)
	if err != nil {
		return nil, err
	}
	s := tier.Status
	rep := &statusReport{
		Tier: tier.Namespace + "/" + tier.Name, Generation: tier.Generation, ObservedGeneration: s.ObservedGeneration,
		Conditions: s.Conditions, ConfigHash: s.ConfigHash, L2Mode: s.L2Mode,
		InjectedPods: s.InjectedPods, ConnectedSidecars: s.ConnectedSidecars, SidecarCounts: s.Sidecars, NACKs: s.NACKs, LastNACK: s.LastNACK,
	}
	// read fills in one line from a metrics page reader.
	type reader func(ctx context.Context) ([]byte, error)
	var reads []reader
	if len(addresses) > 0 {
		for _, a := range addresses {
			rep.Sidecars = append(rep.Sidecars, sidecarStatus{Name: a})
			reads = append(reads, func(ctx context.Context) ([]byte, error) { return getMetrics(ctx, a) })
		}
	} else {
		access := r.opts.Pods
		if access == nil {
			if access, err = newAPIServerPods(k.rest); err != nil {
				return nil, err
			}
		}
		pods, err := k.tierPods(ctx, tier)
		if err != nil {
			return nil, err
		}
		for i := range pods {
			p := &pods[i]
			ready := podReady(p)
			line := sidecarStatus{Name: p.Name, Ready: &ready, State: podState(p)}
			rep.Sidecars = append(rep.Sidecars, line)
			if line.State != "" {
				reads = append(reads, nil)
				continue
			}
			reads = append(reads, func(ctx context.Context) ([]byte, error) {
				return access.Metrics(ctx, p, adminPort(p, tier))
			})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelReads)
	for i, read := range reads {
		if read == nil {
			continue
		}
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(gctx, metricsTimeout)
			defer cancel()
			line := &rep.Sidecars[i]
			page, err := read(ctx)
			if err == nil {
				var m sidecarMetrics
				if m, err = parseMetrics(page); err == nil {
					line.fill(&m, tier)
				}
			}
			if err != nil {
				line.Error = "metrics unavailable: " + err.Error()
			}
			return nil
		})
	}
	_ = g.Wait()
	return rep, ctx.Err()
}

// fill sets the line from the sidecar's metrics.
func (l *sidecarStatus) fill(m *sidecarMetrics, tier *v1alpha1.CacheTier) {
	l.read = true
	l.Version = m.ConfigVersion
	l.Config = configState(m.ConfigVersion, tier.Status.ConfigHash)
	if hr := m.HitRatio(); hr >= 0 {
		l.HitRatio = &hr
	}
	l.Requests = m.Requests
	switch {
	case !hasL2(tier):
		l.L2 = "off"
	case m.CircuitOpen:
		l.L2 = "circuit open"
	default:
		l.L2 = "ok"
	}
	l.L2Errors, l.L2DroppedWrites = m.L2Errors, m.L2DroppedWrites
	if m.ControlPlane != nil {
		l.ControlPlane = "disconnected"
		if *m.ControlPlane {
			l.ControlPlane = "connected"
		}
	}
	l.NACKs = m.NACKs
}

// configState compares a sidecar's config version with the tier's
// status.configHash: both are the sha256 of the same rendered config.
func configState(version, tierHash string) string {
	switch {
	case version == "" || tierHash == "":
		return configUnknown
	case version == tierHash:
		return configCurrent
	}
	return configBehind
}

// getMetrics reads the metrics page of an admin address.
func getMetrics(ctx context.Context, addr string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", textFormat)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxMetricsBodyBytes+1))
}

func (r *runner) printStatus(rep *statusReport, output string) error {
	out := r.streams.Out
	if output == "json" {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	fmt.Fprintf(out, "CacheTier %s (generation %d, observed %d)\n", rep.Tier, rep.Generation, rep.ObservedGeneration)
	for _, c := range rep.Conditions {
		fmt.Fprintf(out, "  %-10s %s (%s)", c.Type+":", c.Status, c.Reason)
		if c.Message != "" {
			fmt.Fprintf(out, ": %s", c.Message)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "  %-10s %s\n", "Config:", orDash(rep.ConfigHash))
	fmt.Fprintf(out, "  %-10s %s\n", "L2:", orDash(rep.L2Mode))
	fmt.Fprintf(out, "  %-10s %d injected, %d connected to the control plane", "Sidecars:", rep.InjectedPods, rep.ConnectedSidecars)
	if c := rep.SidecarCounts; c != nil {
		fmt.Fprintf(out, ": %d current, %d behind, %d rejected (reports of %d operator %s)", c.Current, c.Behind, c.Rejected, c.Replicas, plural(int(c.Replicas), "replica", "replicas"))
	}
	fmt.Fprintln(out)
	if c := rep.SidecarCounts; c != nil && len(c.Versions) > 0 {
		vs := make([]string, len(c.Versions))
		for i, v := range c.Versions {
			vs[i] = fmt.Sprintf("%s (%d)", v.Version, v.Sidecars)
		}
		fmt.Fprintf(out, "  %-10s %s\n", "Versions:", strings.Join(vs, ", "))
	}
	if rep.NACKs > 0 {
		fmt.Fprintf(out, "  %-10s %d, last: %s\n", "NACKs:", rep.NACKs, rep.LastNACK)
	}
	fmt.Fprintln(out)
	if len(rep.Sidecars) == 0 {
		fmt.Fprintln(out, "No pods are labelled or annotated for this tier.")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SIDECAR\tREADY\tCONFIG\tHIT RATIO\tREQUESTS\tL2\tCONTROL PLANE\tNACKS")
	var notes []string
	for _, l := range rep.Sidecars {
		ready := "-"
		if l.Ready != nil {
			ready = fmt.Sprint(*l.Ready)
		}
		if !l.read {
			what := l.State
			if what == "" {
				what = "metrics unavailable"
				notes = append(notes, l.Name+": "+l.Error)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Name, ready, what)
			continue
		}
		config := l.Config
		if l.Version != "" && l.Config != configCurrent {
			config += " (" + short(l.Version) + ")"
		}
		hr := "-"
		if l.HitRatio != nil {
			hr = fmt.Sprintf("%.1f%%", *l.HitRatio*100)
		}
		l2 := l.L2
		if l.L2Errors > 0 || l.L2DroppedWrites > 0 {
			l2 += fmt.Sprintf(" (%g errors, %g dropped writes)", l.L2Errors, l.L2DroppedWrites)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%g\t%s\t%s\t%g\n", l.Name, ready, config, hr, l.Requests, l2, orDash(l.ControlPlane), l.NACKs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// short abbreviates a config hash for a table.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
