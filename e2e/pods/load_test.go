package pods

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of one load run, whatever the test does meanwhile.
const (
	loadMaxDuration = 4 * time.Minute
	loadMaxRequests = 200000
	// loadKeys is how many URLs the load cycles through; they are in L2
	// after the first round.
	loadKeys = 16
)

// load sends steady traffic through the app's Service by its DNS name,
// from keep-alive clients (each a connection of its own, which kube-proxy
// pins to one pod) and from clients that open a new connection per
// request, and counts what a client sees as an error: no answer, or any
// status but 200.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	total  atomic.Int64
	mu     sync.Mutex
	errs   map[string][]string // by client kind, the first few
	nerrs  map[string]int
}

// loadResult is what one phase of load saw.
type loadResult struct {
	requests int64
	errors   map[string]int // by client kind
	samples  map[string][]string
}

func (s *suite) startLoad(keepAlive, newConn int) *load {
	ctx, cancel := context.WithTimeout(context.Background(), loadMaxDuration)
	l := &load{cancel: cancel, errs: map[string][]string{}, nerrs: map[string]int{}}
	run := func(kind string, c *http.Client, w int) {
		defer l.wg.Done()
		for i := 0; ctx.Err() == nil && l.total.Load() < loadMaxRequests; i++ {
			url := fmt.Sprintf("http://%s/tagged/load-%d", serviceHost, (i+w)%loadKeys)
			err := fetch(ctx, c, url)
			if ctx.Err() != nil {
				return // stopped: the last request's error is ours
			}
			l.total.Add(1)
			if err != nil {
				l.record(kind, err)
			}
			// Steady, not flat out: the machine is shared.
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for w := range keepAlive {
		l.wg.Add(1)
		go run("keep-alive", s.httpClient(true), w)
	}
	for w := range newConn {
		l.wg.Add(1)
		go run("new-connection", s.httpClient(false), w)
	}
	return l
}

func fetch(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Host = serviceHost
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s (X-Cache %q)", url, resp.Status, resp.Header.Get("X-Cache"))
	}
	return nil
}

func (l *load) record(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nerrs[kind]++
	if len(l.errs[kind]) < 5 {
		l.errs[kind] = append(l.errs[kind], time.Now().Format("15:04:05.000")+" "+err.Error())
	}
}

// take returns what was seen since the last take and starts counting
// afresh.
func (l *load) take() loadResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := loadResult{requests: l.total.Swap(0), errors: l.nerrs, samples: l.errs}
	l.nerrs, l.errs = map[string]int{}, map[string][]string{}
	return r
}

func (l *load) stop() loadResult {
	l.cancel()
	l.wg.Wait()
	return l.take()
}

func (r loadResult) failed() bool {
	for _, n := range r.errors {
		if n > 0 {
			return true
		}
	}
	return false
}
