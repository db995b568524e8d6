package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Levels of a finding.
const (
	levelError   = "error"
	levelWarning = "warning"
)

// finding is one thing analyze found wrong with a tier.
type finding struct {
	Level string `json:"level"`
	// What names the check: a status condition's type, or "L2ACL".
	What    string `json:"what"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
	// Fix is a command that fixes it, when there is one to print.
	Fix string `json:"fix,omitempty"`
}

type tierFindings struct {
	Tier     string    `json:"tier"`
	Findings []finding `json:"findings"`
}

// errFindings: analyze found errors (exit 1), after printing them.
var errFindings = errors.New("analyze found errors")

// conditionChecks are the status conditions analyze reads, each with the
// level of its False, in the order it prints them.
var conditionChecks = []struct {
	cond  string
	level string
}{
	{v1alpha1.ConditionValid, levelError},
	{v1alpha1.ConditionReady, levelError},
	{v1alpha1.ConditionServicesRouted, levelError},
	{v1alpha1.ConditionPurgesReachEveryPod, levelWarning},
	{v1alpha1.ConditionSidecarImagesMatch, levelWarning},
}

func (r *runner) analyzeCommand() *cobra.Command {
	var output *string
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "analyze [TIER]",
		Short: "Find what defeats the cache: misrouted Services, unreachable pods, purges that reach one pod, shared Redis users",
		Long: `analyze reads the CacheTiers of the namespace (one with TIER, every namespace
with -A) and lists what is wrong with each, with the fix where there is one:

  error    a spec that does not render (a missing or unlabelled Secret, an
           invalid field), pods that are not Ready (sidecars not connected,
           behind, rejecting the config, or to restart for new Secrets), a
           Service that targets the application's port by number (around
           the cache);
  warning  purges and invalidations that reach one pod (an L1-only tier
           with several pods and an operator without its control plane), pods that run another sidecar image than the
           tier's, and an L2 without its own Redis ACL user (the line to
           create it is printed).

It reads the tiers' status, which the operator keeps; nothing else is
reached. It exits 1 when it found an error, 0 otherwise.`,
		Example: `  kubectl tiercache analyze -n shop
  kubectl tiercache analyze web -n shop
  kubectl tiercache analyze -A -o json`,
		Args: maxArgs("TIER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			if len(args) > 0 && allNamespaces {
				return usagef("analyze: -A analyzes every tier; it takes no TIER (got %q)", args[0])
			}
			k, err := r.cluster()
			if err != nil {
				return err
			}
			tiers, err := k.tiersToAnalyze(cmd.Context(), args, allNamespaces)
			if err != nil {
				return err
			}
			rep := make([]tierFindings, len(tiers))
			errs := false
			for i := range tiers {
				rep[i] = tierFindings{Tier: tiers[i].Namespace + "/" + tiers[i].Name, Findings: analyzeTier(&tiers[i])}
				for _, f := range rep[i].Findings {
					errs = errs || f.Level == levelError
				}
			}
			if err := r.printFindings(rep, *output); err != nil {
				return err
			}
			if errs {
				return errFindings
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "analyze every CacheTier of every namespace")
	output = outputFlag(cmd)
	return cmd
}

// tiersToAnalyze reads the named tier, or lists the namespace's (every
// namespace's) tiers, by namespace and name.
func (k *cluster) tiersToAnalyze(ctx context.Context, args []string, all bool) ([]v1alpha1.CacheTier, error) {
	if len(args) == 1 {
		t, err := k.tier(ctx, args[0])
		if err != nil {
			return nil, err
		}
		return []v1alpha1.CacheTier{*t}, nil
	}
	var list v1alpha1.CacheTierList
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(k.namespace))
	}
	if err := k.c.List(ctx, &list, opts...); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the CacheTier API (%s) is not installed in this cluster: install the tiercache chart", v1alpha1.GroupVersion)
		}
		return nil, fmt.Errorf("listing CacheTiers: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.CacheTier) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return list.Items, nil
}

// analyzeTier lists what is wrong with a tier, from its status and spec.
func analyzeTier(t *v1alpha1.CacheTier) []finding {
	out := []finding{}
	if t.Status.ObservedGeneration != t.Generation {
		out = append(out, finding{Level: levelWarning, What: "Status", Message: fmt.Sprintf(
			"the status is of generation %d, the spec is %d: the operator has not reconciled the last change (is it running?); what follows may be out of date",
			t.Status.ObservedGeneration, t.Generation)})
	}
	for _, c := range conditionChecks {
		cond := meta.FindStatusCondition(t.Status.Conditions, c.cond)
		if cond == nil || cond.Status == metav1.ConditionTrue {
			continue
		}
		out = append(out, finding{Level: c.level, What: c.cond, Reason: cond.Reason, Message: cond.Message})
	}
	if l := t.Spec.L2; l != nil && len(l.Addresses) > 0 && l.Username == "" {
		user := "tc-" + t.Namespace + "-" + t.Name
		out = append(out, finding{Level: levelWarning, What: "L2ACL", Message: fmt.Sprintf(
			"the tier's sidecars use Redis's default user: any client of that Redis can read, overwrite or purge this tier's entries and publish on its channel. "+
				"Give the tier its own user (in redis-cli, with a password of your own), then set spec.l2.username: %s and spec.l2.passwordSecretRef (docs/l2.md, Sharing one Redis)", user),
			Fix: l2.ACLSetUserLine(user, tierconfig.KeyPrefix(t.Namespace, t.Name), l.Mode == v1alpha1.L2Cluster)})
	}
	return out
}

func (r *runner) printFindings(rep []tierFindings, output string) error {
	out := r.streams.Out
	if output == "json" {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		return e.Encode(struct {
			Tiers []tierFindings `json:"tiers"`
		}{rep})
	}
	if len(rep) == 0 {
		_, err := fmt.Fprintln(out, "No CacheTiers to analyze.")
		return err
	}
	for _, t := range rep {
		if len(t.Findings) == 0 {
			fmt.Fprintf(out, "%s: no findings\n", t.Tier)
			continue
		}
		fmt.Fprintf(out, "%s:\n", t.Tier)
		for _, f := range t.Findings {
			what := f.What
			if f.Reason != "" {
				what += " (" + f.Reason + ")"
			}
			fmt.Fprintf(out, "  %-7s %s: %s\n", f.Level, what, f.Message)
			if f.Fix != "" {
				fmt.Fprintf(out, "          %s\n", f.Fix)
			}
		}
	}
	return nil
}
