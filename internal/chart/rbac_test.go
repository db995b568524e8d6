package chart

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

const (
	aggregateView  = "rbac.authorization.k8s.io/aggregate-to-view"
	aggregateEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
)

// TestUserRolesCoverCacheTiers: by default the built-in view, edit and
// admin ClusterRoles cover CacheTiers through aggregation (the labels the
// clusterrole-aggregation controller selects on), as cert-manager's and
// Istio's charts do: view reads, edit and admin also write. No user role
// may write the status, which is the operator's. The value turns both off.
func TestUserRolesCoverCacheTiers(t *testing.T) {
	objs := parseObjects(t, helm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS))
	var view, edit rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "tiercache-view").decode(t, &view)
	find(t, objs, "ClusterRole", "tiercache-edit").decode(t, &edit)

	wantLabels := map[string][]string{
		"view": {aggregateView, aggregateEdit, aggregateAdmin},
		"edit": {aggregateEdit, aggregateAdmin},
	}
	for name, role := range map[string]rbacv1.ClusterRole{"view": view, "edit": edit} {
		for _, l := range wantLabels[name] {
			if role.Labels[l] != "true" {
				t.Errorf("ClusterRole tiercache-%s: label %s=%q, want \"true\"", name, l, role.Labels[l])
			}
		}
		for _, r := range role.Rules {
			if !slices.Equal(r.APIGroups, []string{"tiercache.io"}) || !slices.Equal(r.Resources, []string{"cachetiers"}) {
				t.Errorf("ClusterRole tiercache-%s grants %v on %v in %v: only cachetiers in tiercache.io", name, r.Verbs, r.Resources, r.APIGroups)
			}
		}
	}
	if view.Labels[aggregateView] == "true" && edit.Labels[aggregateView] == "true" {
		t.Error("ClusterRole tiercache-edit aggregates into view: viewers could change CacheTiers")
	}
	if got := verbs(view); !slices.Equal(got, []string{"get", "list", "watch"}) {
		t.Errorf("tiercache-view verbs %v, want get, list, watch", got)
	}
	if got := verbs(edit); !slices.Equal(got, []string{"create", "delete", "deletecollection", "patch", "update"}) {
		t.Errorf("tiercache-edit verbs %v, want create, delete, deletecollection, patch, update", got)
	}

	off := parseObjects(t, helm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS, "--set", "rbac.aggregateToDefaultRoles=false"))
	for _, name := range []string{"tiercache-view", "tiercache-edit"} {
		if _, ok := lookup(off, "ClusterRole", name); ok {
			t.Errorf("rbac.aggregateToDefaultRoles=false still renders ClusterRole %s", name)
		}
	}
}

func verbs(r rbacv1.ClusterRole) []string {
	var out []string
	for _, rule := range r.Rules {
		out = append(out, rule.Verbs...)
	}
	slices.Sort(out)
	return out
}
