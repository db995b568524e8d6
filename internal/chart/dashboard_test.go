package chart

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/internal/version"
)

// descNames is a prometheus.Registerer that only records the metric names
// its collectors describe, with their variable label names, including
// vectors that have no series yet.
type descNames map[string][]string

var (
	fqName    = regexp.MustCompile(`fqName: "([^"]+)"`)
	varLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	// constLabel is one name="value" of a Desc's constLabels.
	constLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="[^"]*"`)
	constPart  = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
)

func (d descNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		s := desc.String()
		m := fqName.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		var labels []string
		if l := varLabels.FindStringSubmatch(s); l != nil && l[1] != "" {
			labels = strings.Split(l[1], ",")
		}
		// A metric registered once per value of a const label (one
		// collector per reason) has that label too.
		if c := constPart.FindStringSubmatch(s); c != nil {
			for _, l := range constLabel.FindAllStringSubmatch(c[1], -1) {
				labels = append(labels, l[1])
			}
		}
		for _, l := range d[m[1]] {
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
		d[m[1]] = labels
	}
	return nil
}

func (d descNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d descNames) Unregister(prometheus.Collector) bool { return false }

// has reports whether name is registered.
func (d descNames) has(name string) bool {
	_, ok := d[name]
	return ok
}

// registeredMetrics describes every tiercache_* metric the code registers:
// the sidecar's (internal/metrics and its control plane client) and the
// operator's control plane server.
func registeredMetrics(t *testing.T) descNames {
	t.Helper()
	known := descNames{}
	if _, err := metrics.New(known, func() metrics.L1Stats { return metrics.L1Stats{} }); err != nil {
		t.Fatal(err)
	}
	if err := known.Register(version.Get().Collector()); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.NewServer(controlplane.Options{Registerer: known}); err != nil {
		t.Fatal(err)
	}
	apply := func(context.Context, tierconfig.Config, string) error { return nil }
	if _, err := controlplane.NewClient(controlplane.ClientOptions{
		Target: "127.0.0.1:1", Namespace: "ns", Pod: "pod", Tier: "tier", Apply: apply, Registerer: known,
	}); err != nil {
		t.Fatal(err)
	}
	return known
}

// TestDashboardQueriesRegisteredMetrics: the dashboard is valid JSON, every
// panel has a query, and every tiercache_* metric it queries is one the
// sidecar (internal/metrics) or the operator's control plane
// (internal/controlplane) registers, so a renamed metric cannot leave a
// silently empty panel.
func TestDashboardQueriesRegisteredMetrics(t *testing.T) {
	known := registeredMetrics(t)

	raw, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "tiercache.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Annotations struct {
			List []struct {
				Name string `json:"name"`
				Expr string `json:"expr"`
			} `json:"list"`
		} `json:"annotations"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboards/tiercache.json: %v", err)
	}
	if dash.UID == "" {
		t.Error("the dashboard has no uid (Grafana would duplicate it on every reload)")
	}
	metricName := regexp.MustCompile(`\btiercache_[a-z0-9_]+`)
	used := map[string]bool{}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	// Config pushes show as annotations on every panel.
	pushes := false
	for _, a := range dash.Annotations.List {
		exprs = append(exprs, a.Expr)
		pushes = pushes || strings.Contains(a.Expr, "tiercache_config_applied_timestamp_seconds")
	}
	if !pushes {
		t.Error("no annotation marks config pushes (tiercache_config_applied_timestamp_seconds)")
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
		vars[v.Name] = true
	}
	// Every $variable a query names is one the dashboard defines (a
	// missing one makes the query match nothing, silently).
	varRef := regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)`)
	for _, e := range exprs {
		for _, m := range varRef.FindAllStringSubmatch(e, -1) {
			if !vars[m[1]] {
				t.Errorf("a query names $%s, which the dashboard does not define: %s", m[1], e)
			}
		}
	}
	if !vars["pod"] {
		t.Error("the dashboard has no pod variable")
	}
	byRule := false
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			used[m] = true
		}
		byRule = byRule || strings.Contains(e, "by (namespace, tier, rule)")
	}
	// The CRD promises that a rule's name identifies it in metrics.
	if !byRule {
		t.Error("no panel shows requests per rule (requests_total's rule label)")
	}
	if !slices.Contains(known["tiercache_requests_total"], "rule") {
		t.Errorf("tiercache_requests_total has labels %v, no rule", known["tiercache_requests_total"])
	}
	var unknown []string
	for m := range used {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && known.has(b) {
				base = b
			}
		}
		if !known.has(base) {
			unknown = append(unknown, m)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("the dashboard queries metrics nothing registers: %v", unknown)
	}
	// The panels the chart's docs promise.
	for _, m := range []string{
		"tiercache_requests_total", "tiercache_origin_requests_total",
		"tiercache_request_duration_seconds_bucket", "tiercache_origin_duration_seconds_bucket",
		"tiercache_l2_errors_total", "tiercache_l2_circuit_open", "tiercache_l2_dropped_writes_total",
		"tiercache_l1_bytes", "tiercache_l1_capacity_bytes", "tiercache_l1_entries", "tiercache_l1_evictions_total",
		"tiercache_connected_sidecars", "tiercache_responses_total", "tiercache_config_nacks_total",
		"tiercache_body_store_bytes", "tiercache_body_store_evictions_total", "tiercache_body_store_errors_total",
	} {
		if !used[m] {
			t.Errorf("no panel queries %s", m)
		}
	}
}
