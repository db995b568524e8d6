package proxy

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// counterSeries returns the non-zero series of the counter name, each
// under the key its labels make.
func counterSeries(t *testing.T, reg *prometheus.Registry, name string, key func(labels map[string]string) string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if v := s.GetCounter().GetValue(); v != 0 {
				got[key(l)] = v
			}
		}
	}
	return got
}

// ruleCounts returns the non-zero tiercache_requests_total series as
// "rule result layer" → value.
func ruleCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counterSeries(t, reg, "tiercache_requests_total", func(l map[string]string) string {
		return l["rule"] + " " + l["result"] + " " + l["layer"]
	})
}

// waitCounts waits, for at most waitFor's bound, until ruleCounts is
// want, and fails naming both when it never is.
func waitCounts(t *testing.T, reg *prometheus.Registry, want map[string]float64, what string) {
	t.Helper()
	var got map[string]float64
	deadline := time.Now().Add(5 * time.Second)
	for got = ruleCounts(t, reg); !maps.Equal(got, want) && time.Now().Before(deadline); got = ruleCounts(t, reg) {
		time.Sleep(2 * time.Millisecond)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// requests_total carries the rule a request matched.
func TestRequestsAreCountedUnderTheRuleTheyMatched(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, csRules, newOrigin(t, cacheFor("max-age=60", "hi")), func(o *Options) { o.Metrics = m }, nil)
	f.get("/static/a")
	f.get("/static/a")
	f.get("/static/a")
	f.get("/pass/a")
	f.get("/elsewhere")
	f.do(http.MethodPost, "/static/b") // invalidates /static/b only
	want := map[string]float64{
		"static hit l1":         2,
		"static miss origin":    1,
		"static bypass origin":  1,
		"nocache bypass origin": 1,
		"default miss origin":   1,
	}
	// A request is counted when its handler returns, just after the
	// client has the whole response: wait (bounded) for the last one.
	waitCounts(t, reg, want, "requests_total by rule")

	// A new config version keeps counting a rule of the same name on the
	// same series, and counts a new rule under its own name.
	cfg, err := tierconfig.Parse([]byte(csRules + `
- name: api
  match: {pathPrefix: /api/}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tierconfig.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.px.cfg.Store(c)
	expect(t, f.get("/static/a"), http.StatusOK, "HIT; layer=l1")
	f.get("/api/x")
	want["static hit l1"] = 3
	want["api miss origin"] = 1
	// A request is counted when its handler returns, just after the
	// client has the whole response: wait (bounded) for the last one.
	waitCounts(t, reg, want, "requests_total by rule after the config change")
}
