package kubectlplugin

import (
	"bytes"
	"errors"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names status reads (docs/operations.md, "Metrics").
const (
	metricRequests      = "tiercache_requests_total"
	metricConfigInfo    = "tiercache_config_info"
	metricCircuitOpen   = "tiercache_l2_circuit_open"
	metricL2Errors      = "tiercache_l2_errors_total"
	metricL2Dropped     = "tiercache_l2_dropped_writes_total"
	metricControlPlane  = "tiercache_control_plane_connected"
	metricSidecarNACKs  = "tiercache_config_nacks_total"
	labelResult         = "result"
	labelVersion        = "version"
	resultHit           = "hit"
	resultStale         = "stale"
	maxMetricsBodyBytes = 8 << 20
)

// sidecarMetrics is what status reads from one sidecar's /metrics.
type sidecarMetrics struct {
	// ConfigVersion is the version label of tiercache_config_info whose
	// value is 1: the config in effect.
	ConfigVersion string
	// Requests counts every request since the sidecar started; Served
	// those answered from the cache (results hit and stale), as the
	// dashboard's hit ratio counts them.
	Requests, Served float64
	CircuitOpen      bool
	L2Errors         float64
	L2DroppedWrites  float64
	// ControlPlane is tiercache_control_plane_connected, nil when the
	// sidecar has no control plane (the metric is registered only then).
	ControlPlane *bool
	// NACKs counts the pushed configs the sidecar refused (0 without a
	// control plane).
	NACKs float64
}

// HitRatio is Served/Requests, or -1 before the first request.
func (m *sidecarMetrics) HitRatio() float64 {
	if m.Requests == 0 {
		return -1
	}
	return m.Served / m.Requests
}

// errNotSidecar: the page parsed but is not a Tiercache sidecar's.
var errNotSidecar = errors.New("not a Tiercache sidecar's metrics (no " + metricRequests + ")")

// parseMetrics reads a sidecar's metrics page in the Prometheus text
// format. Counters are summed over every label but the ones read, so that
// labels added later (a rule label, say) change nothing here.
func parseMetrics(page []byte) (sidecarMetrics, error) {
	var m sidecarMetrics
	if len(page) > maxMetricsBodyBytes {
		return m, fmt.Errorf("metrics page of %d bytes is larger than %d", len(page), maxMetricsBodyBytes)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return m, fmt.Errorf("parsing the metrics page: %w", err)
	}
	reqs, ok := families[metricRequests]
	if !ok {
		return m, errNotSidecar
	}
	for _, s := range reqs.GetMetric() {
		v := value(s)
		m.Requests += v
		if r := label(s, labelResult); r == resultHit || r == resultStale {
			m.Served += v
		}
	}
	for _, s := range families[metricConfigInfo].GetMetric() {
		if value(s) == 1 {
			m.ConfigVersion = label(s, labelVersion)
		}
	}
	m.CircuitOpen = sum(families[metricCircuitOpen]) > 0
	m.L2Errors = sum(families[metricL2Errors])
	m.L2DroppedWrites = sum(families[metricL2Dropped])
	if f, ok := families[metricControlPlane]; ok {
		up := sum(f) > 0
		m.ControlPlane = &up
	}
	m.NACKs = sum(families[metricSidecarNACKs])
	return m, nil
}

// value is a counter's, gauge's or untyped sample's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

func sum(f *dto.MetricFamily) float64 {
	var t float64
	for _, m := range f.GetMetric() {
		t += value(m)
	}
	return t
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
