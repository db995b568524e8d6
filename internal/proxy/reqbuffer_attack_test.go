package proxy

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/metrics"
)

// liveHeap is the heap the process holds once garbage is collected.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A buffered body's memory goes when its budget comes back: a client
// that posts 1 MiB bodies one after another to an endpoint that answers
// slowly (or streams) must not make the sidecar hold a megabyte per
// request after the budget says it is free, or the budget bounds nothing.
func TestABufferedBodyIsFreedWhenItsBudgetComesBack(t *testing.T) {
	const n = 40 // 40 MiB read ahead one after another, 16 MiB of budget
	release := make(chan struct{})
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "started ")
		http.NewResponseController(w).Flush()
		select { // a slow answer, or a stream
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	defer close(release)
	obs := observe(t, f.px)
	body := bytes.Repeat([]byte("m"), 1<<20)
	base := liveHeap()
	for i := range n {
		req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/slow", bytes.NewReader(body))
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: got %d", i, resp.StatusCode)
		}
	}
	if got := testCounter(obs.m.RequestBodies.WithLabelValues(metrics.BufferedWhole)); got != n {
		t.Fatalf("%v of %d bodies buffered whole, want all", got, n)
	}
	if left := f.px.reqBudget.left.Load(); left != RequestBufferBudget {
		t.Fatalf("%d bytes of the budget left with every body sent, want %d", left, RequestBufferBudget)
	}
	grew := liveHeap() - base
	t.Logf("%d answers pending after 1 MiB bodies: live heap grew by %.1f MiB", n, float64(grew)/(1<<20))
	if grew > RequestBufferBudget {
		t.Fatalf("live heap grew by %.1f MiB with %d answers pending and the whole budget given back: the bodies are still held", float64(grew)/(1<<20), n)
	}
}
