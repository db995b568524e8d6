package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/version"
)

// pluginName is the name --version prints, the binary's.
const pluginName = "kubectl-tiercache"

// The operator's pods, as the chart labels them, and the container port
// its metrics are on.
const (
	operatorComponent   = "operator"
	operatorMetricsPort = "metrics"
)

// versionReport is the output of version: kubectl version's shape
// (clientVersion), so that the same jq works on both, with the builds the
// cluster runs.
type versionReport struct {
	ClientVersion version.Info `json:"clientVersion"`
	// Operator is one line per operator pod (every namespace).
	Operator []podVersion `json:"operator,omitempty"`
	// Sidecars is one line per injected pod of the namespace (or, with
	// -A, of every namespace).
	Sidecars []podVersion `json:"sidecars,omitempty"`
}

// podVersion is the build one pod runs, from its tiercache_build_info.
type podVersion struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Tier      string `json:"tier,omitempty"`
	// Image is the container's image as the pod spec names it.
	Image string `json:"image,omitempty"`
	version.Info
	// Error says why the build could not be read (the Info is empty).
	Error string `json:"error,omitempty"`
}

func (r *runner) versionCommand() *cobra.Command {
	var output *string
	var clientOnly, allNamespaces bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The versions of the plugin, the operator and every sidecar",
		Long: `version prints the plugin's own version, the git revision it was built from
and the Go version that built it (kubectl tiercache --version prints the same
on one line), then the build every operator pod runs and, by version, the
builds of the namespace's sidecars (-A: of every namespace), each read from
the pod's tiercache_build_info through the API server's pod proxy. A pod
whose build cannot be read is listed with the reason.

--client prints the plugin's version only and reaches nothing. Without it,
a cluster that cannot be reached is an error, after the client's line.`,
		Example: `  kubectl tiercache version
  kubectl tiercache version -A -o json
  kubectl tiercache version --client`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			rep := versionReport{ClientVersion: version.Get()}
			var err error
			if !clientOnly {
				err = r.clusterVersions(cmd.Context(), &rep, allNamespaces)
			}
			if perr := r.printVersions(&rep, *output, clientOnly || err != nil); perr != nil {
				return perr
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the plugin's version only; reach no cluster")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list the sidecars of every namespace")
	output = outputFlag(cmd)
	return cmd
}

// clusterVersions reads the builds of the operator's pods and of the
// sidecars.
func (r *runner) clusterVersions(ctx context.Context, rep *versionReport, allNamespaces bool) error {
	k, err := r.cluster()
	if err != nil {
		return err
	}
	access := r.opts.Pods
	if access == nil {
		if access, err = newAPIServerPods(k.rest); err != nil {
			return err
		}
	}
	var ops corev1.PodList
	if err := k.c.List(ctx, &ops, client.MatchingLabels{
		"app.kubernetes.io/name": "tiercache", "app.kubernetes.io/component": operatorComponent,
	}); err != nil {
		return fmt.Errorf("listing the operator's pods (label app.kubernetes.io/component=operator) in every namespace: %w", err)
	}
	sidecarOpts := []client.ListOption{client.HasLabels{inject.LabelTier}}
	where := "namespace " + k.namespace
	if allNamespaces {
		where = "any namespace"
	} else {
		sidecarOpts = append(sidecarOpts, client.InNamespace(k.namespace))
	}
	var sidecars corev1.PodList
	if err := k.c.List(ctx, &sidecars, sidecarOpts...); err != nil {
		return fmt.Errorf("listing the injected pods of %s: %w", where, err)
	}

	type read struct {
		line *podVersion
		pod  *corev1.Pod
		port int32
	}
	var reads []read
	rep.Operator = make([]podVersion, len(ops.Items))
	for i := range ops.Items {
		p := &ops.Items[i]
		line := &rep.Operator[i]
		*line = podVersion{Namespace: p.Namespace, Pod: p.Name}
		ctr, port := containerWithPort(p, operatorMetricsPort)
		if ctr != nil {
			line.Image = ctr.Image
		}
		reads = append(reads, read{line, p, port})
	}
	rep.Sidecars = make([]podVersion, len(sidecars.Items))
	for i := range sidecars.Items {
		p := &sidecars.Items[i]
		line := &rep.Sidecars[i]
		*line = podVersion{Namespace: p.Namespace, Pod: p.Name, Tier: p.Labels[inject.LabelTier]}
		var port int32
		if c := sidecarOf(p); c != nil {
			line.Image = c.Image
			_, port = containerWithPort(p, inject.AdminPortName)
		}
		reads = append(reads, read{line, p, port})
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelReads)
	for _, rd := range reads {
		if state := runState(rd.pod); state != "" {
			rd.line.Error = state
			continue
		}
		if rd.port == 0 {
			rd.line.Error = "no metrics port in the pod spec"
			continue
		}
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(gctx, metricsTimeout)
			defer cancel()
			page, err := access.Metrics(ctx, rd.pod, rd.port)
			if err == nil {
				rd.line.Info, err = buildInfo(page)
			}
			if err != nil {
				rd.line.Error = err.Error()
			}
			return nil
		})
	}
	_ = g.Wait()
	byName := func(a, b podVersion) int {
		return strings.Compare(a.Namespace+"/"+a.Pod, b.Namespace+"/"+b.Pod)
	}
	slices.SortFunc(rep.Operator, byName)
	slices.SortFunc(rep.Sidecars, byName)
	return ctx.Err()
}

// containerWithPort returns the container (or init container) with the
// named port, and the port's number.
func containerWithPort(p *corev1.Pod, name string) (*corev1.Container, int32) {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			for _, port := range list[i].Ports {
				if port.Name == name {
					return &list[i], port.ContainerPort
				}
			}
		}
	}
	return nil, 0
}

// buildInfo reads tiercache_build_info from a metrics page.
func buildInfo(page []byte) (version.Info, error) {
	if len(page) > maxMetricsBodyBytes {
		return version.Info{}, fmt.Errorf("metrics page of %d bytes is larger than %d", len(page), maxMetricsBodyBytes)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return version.Info{}, fmt.Errorf("parsing the metrics page: %w", err)
	}
	for _, m := range families[version.MetricBuildInfo].GetMetric() {
		return version.Info{Version: label(m, "version"), Revision: label(m, "revision"), GoVersion: label(m, "goversion")}, nil
	}
	return version.Info{}, errors.New("no " + version.MetricBuildInfo + " on its metrics page (a build older than the metric?)")
}

func (r *runner) printVersions(rep *versionReport, output string, clientOnly bool) error {
	out := r.streams.Out
	if output == "json" {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	if _, err := fmt.Fprintf(out, "Client: %s %s\n", pluginName, rep.ClientVersion); err != nil || clientOnly {
		return err
	}
	if len(rep.Operator) == 0 {
		fmt.Fprintln(out, "Operator: no pod found (label app.kubernetes.io/component=operator)")
	}
	for _, l := range rep.Operator {
		fmt.Fprintf(out, "Operator: %s/%s %s\n", l.Namespace, l.Pod, buildOrError(l))
	}
	if len(rep.Sidecars) == 0 {
		fmt.Fprintln(out, "Sidecars: none")
		return nil
	}
	return printSidecarVersions(out, rep.Sidecars)
}

// printSidecarVersions prints how many sidecars run each build, then a
// table of the pods.
func printSidecarVersions(out io.Writer, lines []podVersion) error {
	count := map[string]int{}
	for _, l := range lines {
		count[buildOrError(l)]++
	}
	builds := make([]string, 0, len(count))
	for b := range count {
		builds = append(builds, b)
	}
	sort.Slice(builds, func(i, j int) bool {
		if count[builds[i]] != count[builds[j]] {
			return count[builds[i]] > count[builds[j]]
		}
		return builds[i] < builds[j]
	})
	summary := make([]string, len(builds))
	for i, b := range builds {
		summary[i] = fmt.Sprintf("%s (%d)", b, count[b])
	}
	fmt.Fprintf(out, "Sidecars: %s\n\n", strings.Join(summary, ", "))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tTIER\tVERSION\tREVISION\tIMAGE")
	for _, l := range lines {
		v, rev := l.Version, l.Revision
		if l.Error != "" {
			v, rev = "-", l.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Namespace, l.Pod, l.Tier, v, rev, orDash(l.Image))
	}
	return tw.Flush()
}

func buildOrError(l podVersion) string {
	if l.Error != "" {
		return "unknown (" + l.Error + ")"
	}
	return l.Info.String()
}
