package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
)

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule
// the chart renders; decoded strictly, so a misspelled field fails.
type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// targetLabels are the labels a series gets from its scrape rather than
// from the code: Prometheus' job and instance, the Prometheus Operator's
// namespace, pod, container, endpoint and service, and tier, which the
// chart's PodMonitor copies from the pod label tiercache.io/tier.
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "endpoint", "service", "tier"}

// knownLabelValues are the values the code gives the labels the alerts
// match on, so that a matcher on a value nothing produces is caught.
var knownLabelValues = map[string]map[string][]string{
	"tiercache_requests_total": {"result": {
		metrics.ResultHit, metrics.ResultMiss, metrics.ResultStale, metrics.ResultRevalidated,
		metrics.ResultBypass, metrics.ResultError,
	}},
	"tiercache_purge_requests_total": {"result": {
		invalidate.ResultPurged, invalidate.ResultFailed, invalidate.ResultUnauthorized,
		invalidate.ResultLimited, invalidate.ResultInvalid,
	}},
}

// The alerts issue 14 asks for, by the condition they page on.
var wantAlerts = map[string]string{
	"TiercacheHitRatioCollapse":         "hit ratio collapse",
	"TiercacheOriginErrors":             "origin error rate",
	"TiercacheL2CircuitOpen":            "L2 circuit open",
	"TiercacheConfigRejected":           "config rejected (NACK)",
	"TiercacheConfigVersionSkew":        "sidecars on an old config version",
	"TiercacheControlPlaneDisconnected": "sidecars cut off from config changes",
	"TiercacheL2WritesDropped":          "dropped L2 writes",
	"TiercachePurgeFailures":            "purge failures",
	"TiercacheOperatorDown":             "the operator or its webhooks down",
	"TiercacheSidecarMetricsAbsent":     "sidecar metrics absent (scrape broken)",
}

var (
	selectorRE = regexp.MustCompile(`\b(tiercache_[a-z0-9_]+)\s*(\{([^}]*)\})?`)
	matcherRE  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	rangeRE    = regexp.MustCompile(`\[([^\]]*)\]`)
	offsetRE   = regexp.MustCompile(`\boffset\s+(\S+?)\)`)
	durationRE = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)
)

// checkExpr returns what is wrong with a PromQL expression for the
// registered metrics: brackets that do not pair, metrics nothing
// registers, label matchers or grouping labels the metrics do not have,
// label values the code never produces, malformed ranges. It is not a
// PromQL parser (the module has none): it checks what a renamed metric or
// label would break.
func checkExpr(expr string, known descNames) []string {
	var problems []string
	var stack []rune
	pairs := map[rune]rune{')': '(', '}': '{', ']': '['}
	inString := false
	for _, r := range expr {
		switch {
		case r == '"':
			inString = !inString
		case inString:
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return append(problems, fmt.Sprintf("unbalanced %q", r))
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 || inString {
		return append(problems, "unclosed bracket or string")
	}

	labelsOf := map[string]bool{}
	for _, l := range targetLabels {
		labelsOf[l] = true
	}
	sels := selectorRE.FindAllStringSubmatch(expr, -1)
	if len(sels) == 0 {
		problems = append(problems, "queries no tiercache_ metric")
	}
	for _, m := range sels {
		name := m[1]
		labels, ok := known[name]
		if !ok {
			problems = append(problems, "metric "+name+" is not registered by the code")
			continue
		}
		for _, l := range labels {
			labelsOf[l] = true
		}
		if m[3] == "" {
			continue
		}
		for _, raw := range strings.Split(m[3], ",") {
			mm := matcherRE.FindStringSubmatch(raw)
			if mm == nil {
				problems = append(problems, fmt.Sprintf("%s: matcher %q does not parse", name, raw))
				continue
			}
			label, op, value := mm[1], mm[2], mm[3]
			if !slices.Contains(labels, label) && !slices.Contains(targetLabels, label) {
				problems = append(problems, fmt.Sprintf("%s has no label %q (it has %v)", name, label, labels))
				continue
			}
			values, checked := knownLabelValues[name][label]
			if !checked {
				continue
			}
			alts := []string{value}
			if op == "=~" || op == "!~" {
				alts = strings.Split(value, "|")
			}
			for _, v := range alts {
				if !slices.Contains(values, v) {
					problems = append(problems, fmt.Sprintf("%s{%s}: the code never sets the value %q (it sets %v)", name, label, v, values))
				}
			}
		}
	}
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" && !labelsOf[l] {
				problems = append(problems, fmt.Sprintf("%s (%s): no metric of the expression has the label %q", g[1], g[2], l))
			}
		}
	}
	for _, r := range rangeRE.FindAllStringSubmatch(expr, -1) {
		if !durationRE.MatchString(r[1]) {
			problems = append(problems, fmt.Sprintf("range [%s] is not a duration", r[1]))
		}
	}
	for _, o := range offsetRE.FindAllStringSubmatch(expr, -1) {
		if !durationRE.MatchString(o[1]) {
			problems = append(problems, fmt.Sprintf("offset %s is not a duration", o[1]))
		}
	}
	return problems
}

func TestCheckExprCatchesWhatARenameBreaks(t *testing.T) {
	known := registeredMetrics(t)
	cases := map[string]struct {
		expr string
		want string // "" = no problem
	}{
		"a query of registered metrics and labels passes": {
			`sum by (namespace, tier) (rate(tiercache_requests_total{result=~"hit|stale"}[10m])) > 1`, ""},
		"an unregistered metric is caught": {
			`rate(tiercache_request_total[5m]) > 0`, "tiercache_request_total is not registered"},
		"a label the metric does not have is caught": {
			`tiercache_requests_total{code="500"}`, `has no label "code"`},
		"a label value the code never sets is caught": {
			`tiercache_requests_total{result=~"hit|fresh"}`, `never sets the value "fresh"`},
		"grouping by a label no metric has is caught": {
			`sum by (rule) (tiercache_l2_circuit_open)`, `the label "rule"`},
		"an unbalanced bracket is caught": {
			`sum(rate(tiercache_l2_dropped_writes_total[5m])`, "unclosed"},
		"a malformed range is caught": {
			`rate(tiercache_l2_dropped_writes_total[5 m])`, "is not a duration"},
		"a malformed offset is caught": {
			`rate(tiercache_l2_dropped_writes_total[5m] offset 1day)`, "offset 1day"},
	}
	for name, c := range cases {
		got := strings.Join(checkExpr(c.expr, known), "; ")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: %s", name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: problems %q, want one with %q", name, got, c.want)
		}
	}
}

// renderAlerts returns the alerting rules of the PrometheusRule the chart
// renders for a values file of testdata/values (plus extra --set args).
func renderAlerts(t *testing.T, file string, set ...string) []alertRule {
	t.Helper()
	args := []string{"template", releaseName, chartDir(t), "--namespace", releaseNS, "-f", mustAbs(t, filepath.Join("testdata", "values", file))}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objs := byKind(parseObjects(t, helm(t, args...)), "PrometheusRule")
	if len(objs) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(objs))
	}
	var pr prometheusRule
	objs[0].decode(t, &pr)
	var rules []alertRule
	for _, g := range pr.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertsQueryRegisteredMetrics: every alert of the PrometheusRule
// (all of them on, as by default) queries metrics, labels and label values
// the code registers, carries a severity, a summary, a description and a
// runbook_url whose anchor is a heading of docs/operations.md, and the
// alerts the chart documents are the ones issue 14 asks for.
func TestAlertsQueryRegisteredMetrics(t *testing.T) {
	known := registeredMetrics(t)
	rules := renderAlerts(t, "alerts.yaml",
		"prometheusRule.alerts.controlPlaneDisconnected.enabled=true", // off in alerts.yaml
		"prometheusRule.runbookURL=https://github.com/tiercache/tiercache/blob/main/docs/operations.md")
	ops, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(ops), "\n") {
		if h, ok := strings.CutPrefix(l, "### "); ok {
			anchors[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	var names []string
	for _, r := range rules {
		names = append(names, r.Alert)
		for _, p := range checkExpr(r.Expr, known) {
			t.Errorf("%s: %s\n%s", r.Alert, p, r.Expr)
		}
		if r.Labels["severity"] == "" {
			t.Errorf("%s has no severity label", r.Alert)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s has no %s annotation", r.Alert, a)
			}
		}
		if _, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#"); !anchors[anchor] || anchor != strings.ToLower(r.Alert) {
			t.Errorf("%s: runbook_url %q does not point at a \"### %s\" heading of docs/operations.md", r.Alert, r.Annotations["runbook_url"], r.Alert)
		}
		if r.For != "" && !durationRE.MatchString(r.For) {
			t.Errorf("%s: for %q is not a duration", r.Alert, r.For)
		}
	}
	var want []string
	for a := range wantAlerts {
		want = append(want, a)
	}
	sort.Strings(want)
	sort.Strings(names)
	if !slices.Equal(names, want) {
		t.Errorf("alerts %v, want %v", names, want)
	}
}

// TestAlertValuesReachTheRules: thresholds, durations, severities, alert
// labels and enabled flags from values.yaml end up in the rules.
func TestAlertValuesReachTheRules(t *testing.T) {
	rules := renderAlerts(t, "alerts.yaml")
	byName := map[string]alertRule{}
	for _, r := range rules {
		byName[r.Alert] = r
	}
	if _, ok := byName["TiercacheControlPlaneDisconnected"]; ok {
		t.Error("TiercacheControlPlaneDisconnected is rendered although alerts.controlPlaneDisconnected.enabled is false")
	}
	hr := byName["TiercacheHitRatioCollapse"]
	for _, want := range []string{"< 0.3 *", "offset 1w"} {
		if !strings.Contains(hr.Expr, want) {
			t.Errorf("TiercacheHitRatioCollapse expr lacks %q:\n%s", want, hr.Expr)
		}
	}
	if hr.For != "30m" {
		t.Errorf("TiercacheHitRatioCollapse for %q, want 30m", hr.For)
	}
	if oe := byName["TiercacheOriginErrors"]; !strings.Contains(oe.Expr, "> 0.1") || oe.Labels["severity"] != "warning" {
		t.Errorf("TiercacheOriginErrors: expr %q severity %q, want ratio 0.1 and warning", oe.Expr, oe.Labels["severity"])
	}
	if pf := byName["TiercachePurgeFailures"]; !strings.Contains(pf.Expr, "[1h]") || pf.Labels["severity"] != "critical" {
		t.Errorf("TiercachePurgeFailures: expr %q severity %q, want window 1h and critical", pf.Expr, pf.Labels["severity"])
	}
	for _, r := range rules {
		if r.Labels["team"] != "platform" {
			t.Errorf("%s labels %v lack team: platform (prometheusRule.alertLabels)", r.Alert, r.Labels)
		}
		if !strings.HasPrefix(r.Annotations["runbook_url"], "https://wiki.example.com/tiercache#") {
			t.Errorf("%s runbook_url %q does not start with prometheusRule.runbookURL", r.Alert, r.Annotations["runbook_url"])
		}
	}
}

// TestOperatorAlertsNeedTheOperatorsMetrics: the alerts over the
// operator's series render only when the chart scrapes them (without the
// ServiceMonitor, absent() would fire forever), the sidecar-metrics one
// only when the PodMonitor scrapes the sidecars too, and the operator-down
// alert says what the webhook's failure policy means for pods.
func TestOperatorAlertsNeedTheOperatorsMetrics(t *testing.T) {
	names := func(rules []alertRule) map[string]alertRule {
		m := map[string]alertRule{}
		for _, r := range rules {
			m[r.Alert] = r
		}
		return m
	}
	noSM := names(renderAlerts(t, "alerts.yaml", "serviceMonitor.enabled=false"))
	for _, a := range []string{"TiercacheOperatorDown", "TiercacheSidecarMetricsAbsent"} {
		if _, ok := noSM[a]; ok {
			t.Errorf("%s rendered without serviceMonitor.enabled", a)
		}
	}
	noPM := names(renderAlerts(t, "alerts.yaml", "podMonitor.enabled=false"))
	if _, ok := noPM["TiercacheSidecarMetricsAbsent"]; ok {
		t.Error("TiercacheSidecarMetricsAbsent rendered without podMonitor.enabled")
	}
	down, ok := noPM["TiercacheOperatorDown"]
	if !ok {
		t.Fatal("TiercacheOperatorDown not rendered with serviceMonitor.enabled")
	}
	if !strings.Contains(down.Expr, `namespace="`+releaseNS+`"`) || !strings.Contains(down.Expr, `service="tiercache-metrics"`) ||
		!strings.Contains(down.Annotations["description"], "cannot be") || down.Labels["severity"] != "critical" {
		t.Errorf("TiercacheOperatorDown: %+v, want the release's metrics Service, critical, pods cannot be created", down)
	}
	ignore := names(renderAlerts(t, "alerts.yaml", "webhook.failurePolicy=Ignore"))["TiercacheOperatorDown"]
	if !strings.Contains(ignore.Annotations["description"], "start without the cache") {
		t.Errorf("with failurePolicy Ignore the description says %q", ignore.Annotations["description"])
	}
}
