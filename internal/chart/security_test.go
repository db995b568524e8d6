package chart

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// uidFields lists every runAsUser, runAsGroup and fsGroup under v, as
// "path=value".
func uidFields(path string, v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := path + "." + k
			if k == "runAsUser" || k == "runAsGroup" || k == "fsGroup" {
				out = append(out, fmt.Sprintf("%s=%v", p, c))
				continue
			}
			out = append(out, uidFields(p, c)...)
		}
	case []any:
		for _, c := range x {
			out = append(out, uidFields(path+"[]", c)...)
		}
	}
	return out
}

// renderedUIDs renders the chart (extra helm template args) and returns
// the uid fields of every object, "Kind/name.path=value", sorted.
func renderedUIDs(t *testing.T, args ...string) []string {
	t.Helper()
	out := helm(t, append([]string{"template", releaseName, chartDir(t), "--namespace", releaseNS}, args...)...)
	var all []string
	for _, o := range parseObjects(t, out) {
		all = append(all, uidFields(o.u.GetKind()+"/"+o.u.GetName(), o.u.Object)...)
	}
	sort.Strings(all)
	return all
}

// TestNoHardCodedUID: by default nothing sets a uid but the bundled Redis
// (its image starts as root), which does not on OpenShift (detected by the
// API group security.openshift.io/v1), where the restricted SCC assigns
// one and refuses one outside the namespace's range. The operator's and
// the sidecars' uids come from values only.
func TestNoHardCodedUID(t *testing.T) {
	redis := []string{
		"Deployment/tiercache-redis.spec.template.spec.securityContext.fsGroup=999",
		"Deployment/tiercache-redis.spec.template.spec.securityContext.runAsGroup=999",
		"Deployment/tiercache-redis.spec.template.spec.securityContext.runAsUser=999",
	}
	cases := map[string]struct {
		args []string
		want []string
	}{
		"by default only the bundled Redis has a uid": {
			[]string{"--set", "redis.bundled.enabled=true"}, redis,
		},
		"on OpenShift nothing has a uid": {
			[]string{"--set", "redis.bundled.enabled=true", "--api-versions", "security.openshift.io/v1"}, nil,
		},
		"an empty Redis uid leaves it unset": {
			[]string{"--set", "redis.bundled.enabled=true", "--set", "redis.bundled.runAsUser="}, nil,
		},
		"the operator's uid and gid come from values": {
			[]string{"--set", "operator.runAsUser=1001", "--set", "operator.runAsGroup=1002"}, []string{
				"Deployment/tiercache-operator.spec.template.spec.securityContext.runAsGroup=1002",
				"Deployment/tiercache-operator.spec.template.spec.securityContext.runAsUser=1001",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := renderedUIDs(t, tc.args...); !slices.Equal(got, tc.want) {
				t.Errorf("uid fields:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}
