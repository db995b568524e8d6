package metrics

import (
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
			if got := testutil.ToFloat64(m.requests.WithLabelValues(r, l)); got != float64(n) {
				t.Errorf("requests_total{result=%q,layer=%q} = %v, want %d", r, l, got, n)
			}
		}
	}
	for _, pair := range [][2]string{{"teapot", LayerL1}, {ResultHit, "l3"}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(pair[0], pair[1])); got != 1 {
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
