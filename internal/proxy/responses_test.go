package proxy

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/metrics"
)

// classCounts returns the non-zero tiercache_responses_total series by
// class.
func classCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counterSeries(t, reg, "tiercache_responses_total", func(l map[string]string) string { return l["class"] })
}

// TestAnswersAreCountedByStatusClass: every answer to a client counts
// once under its status class, whoever made it: a hit, the origin's 404
// and redirect, and the sidecar's own refusal of HTTP/2 (505).
func TestAnswersAreCountedByStatusClass(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, csRules, newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/static/missing":
			http.Error(w, "no", http.StatusNotFound)
		case "/static/moved":
			http.Redirect(w, r, "/static/a", http.StatusMovedPermanently)
		default:
			w.Header().Set("Cache-Control", "max-age=60")
			_, _ = w.Write([]byte("hi"))
		}
	}), func(o *Options) { o.Metrics = m }, nil)
	expect(t, f.get("/static/a"), http.StatusOK, "MISS")
	expect(t, f.get("/static/a"), http.StatusOK, "HIT; layer=l1")
	if r := f.get("/static/missing"); r.status != http.StatusNotFound {
		t.Fatalf("/static/missing: %d", r.status)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(f.srv.URL + "/static/moved")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently {
		t.Fatalf("/static/moved: %d", resp.StatusCode)
	}
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/static/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Method = http.MethodPost
	if r := f.send(req); r.status != http.StatusNotImplemented {
		t.Fatalf("a gRPC POST: %d, want the sidecar's 501", r.status)
	}
	want := map[string]float64{"2xx": 2, "3xx": 1, "4xx": 1, "5xx": 1}
	var got map[string]float64
	// An answer is counted when its handler returns, just after the
	// client has it: wait (bounded) for the last one.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if got = classCounts(t, reg); maps.Equal(got, want) || time.Now().After(deadline) {
			break
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("responses_total by class = %v, want %v", got, want)
	}
}
