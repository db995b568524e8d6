package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// tierLine is one tier in `status` without TIER (and `status -A`): what
// its status says, nothing read from its pods.
type tierLine struct {
	Namespace string `json:"namespace"`
	Tier      string `json:"tier"`
	// Ready is the Ready condition's status ("True", "False", "Unknown"),
	// "-" before the operator set one; Reason and Message are its own.
	Ready     string `json:"ready"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Pods      int32  `json:"injectedPods"`
	Connected int32  `json:"connectedSidecars"`
	Current   int32  `json:"current"`
	Behind    int32  `json:"behind"`
	Rejected  int32  `json:"rejected"`
	L2Mode    string `json:"l2Mode,omitempty"`
	// Stale: the status is of an older generation than the spec (the
	// operator has not reconciled the last change yet, or is not running).
	Stale bool `json:"stale,omitempty"`
}

// statusTiers prints one line per CacheTier of the namespace, or of every
// namespace.
func (r *runner) statusTiers(ctx context.Context, allNamespaces bool, output string) error {
	k, err := r.cluster()
	if err != nil {
		return err
	}
	var list v1alpha1.CacheTierList
	var opts []client.ListOption
	where := "namespace " + k.namespace
	if allNamespaces {
		where = "any namespace"
	} else {
		opts = append(opts, client.InNamespace(k.namespace))
	}
	if err := k.c.List(ctx, &list, opts...); err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("the CacheTier API (%s) is not installed in this cluster: install the tiercache chart", v1alpha1.GroupVersion)
		}
		return fmt.Errorf("listing the CacheTiers of %s: %w", where, err)
	}
	lines := make([]tierLine, 0, len(list.Items))
	for i := range list.Items {
		lines = append(lines, tierSummary(&list.Items[i]))
	}
	slices.SortFunc(lines, func(a, b tierLine) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Tier, b.Tier)
	})
	out := r.streams.Out
	if output == "json" {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		return e.Encode(struct {
			Tiers []tierLine `json:"tiers"`
		}{lines})
	}
	if len(lines) == 0 {
		fmt.Fprintf(out, "No CacheTiers in %s.\n", where)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tTIER\tREADY\tREASON\tPODS\tCONNECTED\tCURRENT\tBEHIND\tREJECTED\tL2")
	for _, l := range lines {
		reason := orDash(l.Reason)
		if l.Stale {
			reason += " (status of an older generation)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", l.Namespace, l.Tier, l.Ready, reason,
			l.Pods, l.Connected, l.Current, l.Behind, l.Rejected, orDash(l.L2Mode))
	}
	return tw.Flush()
}

func tierSummary(t *v1alpha1.CacheTier) tierLine {
	s := t.Status
	l := tierLine{
		Namespace: t.Namespace, Tier: t.Name, Ready: "-",
		Pods: s.InjectedPods, Connected: s.ConnectedSidecars, L2Mode: s.L2Mode,
		Stale: s.ObservedGeneration != t.Generation,
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); c != nil {
		l.Ready, l.Reason, l.Message = string(c.Status), c.Reason, c.Message
	}
	if c := s.Sidecars; c != nil {
		l.Current, l.Behind, l.Rejected = c.Current, c.Behind, c.Rejected
	}
	return l
}
