package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// TestWebhooksMatchManifests: the chart registers the same webhooks as
// config/webhook/manifests.yaml, which the operator's envtest tests
// install: names, rules, paths, matchConditions and the fixed settings.
// Only what the chart makes a value (failurePolicy, timeoutSeconds, the
// Service and the excluded namespaces) may differ, and with the default
// values the failure policy and timeout do not.
func TestWebhooksMatchManifests(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ref := parseObjects(t, string(raw))
	var wantM admissionregistrationv1.MutatingWebhookConfiguration
	var wantV admissionregistrationv1.ValidatingWebhookConfiguration
	if ms := byKind(ref, "MutatingWebhookConfiguration"); len(ms) == 1 {
		ms[0].decode(t, &wantM)
	} else {
		t.Fatalf("manifests.yaml has %d MutatingWebhookConfigurations, want 1", len(ms))
	}
	if vs := byKind(ref, "ValidatingWebhookConfiguration"); len(vs) == 1 {
		vs[0].decode(t, &wantV)
	} else {
		t.Fatalf("manifests.yaml has %d ValidatingWebhookConfigurations, want 1", len(vs))
	}

	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) {
			objs := parseObjects(t, render(t, c))
			ms, vs := byKind(objs, "MutatingWebhookConfiguration"), byKind(objs, "ValidatingWebhookConfiguration")
			if len(ms) != 1 || len(vs) != 1 {
				t.Fatalf("rendered %d mutating and %d validating configurations, want 1 each", len(ms), len(vs))
			}
			var gotM admissionregistrationv1.MutatingWebhookConfiguration
			var gotV admissionregistrationv1.ValidatingWebhookConfiguration
			ms[0].decode(t, &gotM)
			vs[0].decode(t, &gotV)
			if c.name == "default" {
				if gotM.Name != wantM.Name || gotV.Name != wantV.Name {
					t.Errorf("configuration names %s, %s; manifests.yaml has %s, %s", gotM.Name, gotV.Name, wantM.Name, wantV.Name)
				}
			}
			if len(gotM.Webhooks) != len(wantM.Webhooks) || len(gotV.Webhooks) != len(wantV.Webhooks) {
				t.Fatalf("webhook counts %d+%d, manifests.yaml %d+%d", len(gotM.Webhooks), len(gotV.Webhooks), len(wantM.Webhooks), len(wantV.Webhooks))
			}
			for i, w := range wantM.Webhooks {
				g := gotM.Webhooks[i]
				same(t, w.Name, "name", g.Name, w.Name)
				same(t, w.Name, "rules", g.Rules, w.Rules)
				same(t, w.Name, "path", g.ClientConfig.Service.Path, w.ClientConfig.Service.Path)
				same(t, w.Name, "matchConditions", g.MatchConditions, w.MatchConditions)
				same(t, w.Name, "sideEffects", g.SideEffects, w.SideEffects)
				same(t, w.Name, "admissionReviewVersions", g.AdmissionReviewVersions, w.AdmissionReviewVersions)
				same(t, w.Name, "reinvocationPolicy", g.ReinvocationPolicy, w.ReinvocationPolicy)
				same(t, w.Name, "objectSelector", g.ObjectSelector, w.ObjectSelector)
				if c.name == "default" {
					same(t, w.Name, "failurePolicy", g.FailurePolicy, w.FailurePolicy)
					same(t, w.Name, "timeoutSeconds", g.TimeoutSeconds, w.TimeoutSeconds)
				}
				// The manifest's excluded namespaces (its operator runs in
				// tiercache-system) are excluded by the default chart too.
				if c.name == "default" {
					notIn := namespaceNotIn(t, gotM)
					for _, e := range w.NamespaceSelector.MatchExpressions {
						for _, ns := range e.Values {
							if !slices.Contains(notIn, ns) {
								t.Errorf("%s: the chart does not exclude namespace %s, manifests.yaml does", w.Name, ns)
							}
						}
					}
				}
			}
			for i, w := range wantV.Webhooks {
				g := gotV.Webhooks[i]
				same(t, w.Name, "name", g.Name, w.Name)
				same(t, w.Name, "rules", g.Rules, w.Rules)
				same(t, w.Name, "path", g.ClientConfig.Service.Path, w.ClientConfig.Service.Path)
				same(t, w.Name, "matchConditions", g.MatchConditions, w.MatchConditions)
				same(t, w.Name, "sideEffects", g.SideEffects, w.SideEffects)
				same(t, w.Name, "admissionReviewVersions", g.AdmissionReviewVersions, w.AdmissionReviewVersions)
				same(t, w.Name, "namespaceSelector", g.NamespaceSelector, w.NamespaceSelector)
				same(t, w.Name, "objectSelector", g.ObjectSelector, w.ObjectSelector)
				if c.name == "default" {
					same(t, w.Name, "failurePolicy", g.FailurePolicy, w.FailurePolicy)
					same(t, w.Name, "timeoutSeconds", g.TimeoutSeconds, w.TimeoutSeconds)
				}
			}
			// The chart never sets a caBundle: the operator or
			// cert-manager owns it, and Helm must not reset it.
			for _, w := range gotM.Webhooks {
				if len(w.ClientConfig.CABundle) != 0 {
					t.Errorf("%s: the chart sets a caBundle", w.Name)
				}
			}
			for _, w := range gotV.Webhooks {
				if len(w.ClientConfig.CABundle) != 0 {
					t.Errorf("%s: the chart sets a caBundle", w.Name)
				}
			}
		})
	}
}

func same[T any](t *testing.T, webhook, field string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := yaml.Marshal(got)
		w, _ := yaml.Marshal(want)
		t.Errorf("%s %s:\n--- chart:\n%s--- manifests.yaml:\n%s", webhook, field, g, w)
	}
}
