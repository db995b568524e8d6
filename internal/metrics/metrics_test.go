package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRequestCountsEveryResultAndLayerUnderItsOwnLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Each known pair a different number of times, so that a mix-up of
	// indexes shows; then a pair outside the known ones.
	n := 0
	for _, r := range results {
		for _, l := range layers {
			n++
			for range n {
				m.Request(r, l, 0.001)
			}
		}
	}
	m.Request("teapot", LayerL1, 0.001)
	m.Request(ResultHit, "l3", 0.001)
	n = 0
	for _, r := range results {
		for _, l := range layers {
			n++
			if got := testutil.ToFloat64(m.requests.WithLabelValues(r, l, "")); got != float64(n) {
				t.Errorf("requests_total{result=%q,layer=%q} = %v, want %d", r, l, got, n)
			}
		}
	}
	for _, pair := range [][2]string{{"teapot", LayerL1}, {ResultHit, "l3"}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(pair[0], pair[1], "")); got != 1 {
			t.Errorf("requests_total{result=%q,layer=%q} = %v, want 1", pair[0], pair[1], got)
		}
	}
	// Durations by result: the layers' counts summed, plus the unknown
	// layer's request; the unknown result has no histogram.
	count, err := testutil.GatherAndCount(reg, "tiercache_request_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if count != len(results) {
		t.Errorf("%d duration series, want %d (one per known result)", count, len(results))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tiercache_request_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			res := s.GetLabel()[0].GetValue()
			i := resultIndex(res)
			wantN := uint64(0)
			for j := range layers {
				wantN += uint64(i*len(layers) + j + 1)
			}
			if res == ResultHit {
				wantN++ // the request with an unknown layer
			}
			if got := s.GetHistogram().GetSampleCount(); got != wantN {
				t.Errorf("request_duration_seconds{result=%q} has %d samples, want %d", res, got, wantN)
			}
		}
	}
}

func TestRuleRequestCountsUnderTheRulesLabelOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	static, api := m.Rule("static"), m.Rule("api")
	if m.Rule("static") != static {
		t.Fatal("Rule returned new counters for a name it already had")
	}
	m.RuleRequest(static, ResultHit, LayerL1, 0.001)
	m.RuleRequest(static, ResultHit, LayerL1, 0.001)
	m.RuleRequest(api, ResultMiss, LayerOrigin, 0.001)
	m.RuleRequest(api, ResultHit, "l3", 0.001)
	m.Request(ResultError, LayerNone, 0)
	for _, c := range []struct {
		result, layer, rule string
		want                float64
	}{
		{ResultHit, LayerL1, "static", 2},
		{ResultMiss, LayerOrigin, "api", 1},
		{ResultHit, "l3", "api", 1},
		{ResultError, LayerNone, "", 1},
		{ResultHit, LayerL1, "api", 0},
		{ResultHit, LayerL1, "", 0},
	} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(c.result, c.layer, c.rule)); got != c.want {
			t.Errorf("requests_total{result=%q,layer=%q,rule=%q} = %v, want %v", c.result, c.layer, c.rule, got, c.want)
		}
	}
}

func BenchmarkRuleRequest(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	r := m.Rule("static")
	b.ReportAllocs()
	for b.Loop() {
		m.RuleRequest(r, ResultHit, LayerL1, 0.0001)
	}
}

func BenchmarkRequest(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Request(ResultHit, LayerL1, 0.0001)
	}
}

func TestRequestsTotalIsThereBeforeTheFirstRequest(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, nil); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "tiercache_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(results)*len(layers) {
		t.Errorf("%d requests_total series before any request, want %d (every result and layer, rule=\"\")", n, len(results)*len(layers))
	}
}

// TestL1EvictionsAreSplitByReason: the L1 series read the stats at scrape
// time; evictions are one counter per reason, and capacity is a gauge.
func TestL1EvictionsAreSplitByReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, func() L1Stats {
		return L1Stats{Entries: 3, Bytes: 300, Expired: 5, NoSpace: 7, Capacity: 1 << 20}
	}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP tiercache_l1_capacity_bytes Bytes L1 may hold (l1.maxSize rounded up to a whole MiB): l1_bytes over it is how full L1 is.
# TYPE tiercache_l1_capacity_bytes gauge
tiercache_l1_capacity_bytes 1.048576e+06
# HELP tiercache_l1_evictions_total ` + l1EvictionsHelp + `
# TYPE tiercache_l1_evictions_total counter
tiercache_l1_evictions_total{reason="expired"} 5
tiercache_l1_evictions_total{reason="space"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tiercache_l1_capacity_bytes", "tiercache_l1_evictions_total"); err != nil {
		t.Fatal(err)
	}
}
