package main

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// ReplayRun is one replay against one server.
type ReplayRun struct {
	Replay      *Replay
	Base        string // the server under test (loopback)
	Concurrency int
	Requests    int64         // how many requests (0..Requests-1 of the replay)
	Duration    time.Duration // bound on the run
	Timeout     time.Duration // per request
	OriginStats string        // demo-origin's /stats: reset before, read after
	CPUPids     []int         // the server's processes: CPU time over the run
	Transport   http.RoundTripper
}

// maxReplayBody bounds a body read (and decoded) by the replay.
const maxReplayBody = 16 << 20

// markerRE finds the origin's per-session marker in a body.
var markerRE = regexp.MustCompile(`tc-session=([A-Za-z0-9_-]+);`)

// ReplayKind counts the answers for one resource kind.
type ReplayKind struct {
	Requests    int64 `json:"requests"`
	FromCache   int64 `json:"from_cache"`
	ClientBytes int64 `json:"client_bytes"`
}

// ReplayLoggedIn counts the answers to signed-in visitors' requests for
// pages and API answers (the personalised kinds).
type ReplayLoggedIn struct {
	Requests int64 `json:"requests"`
	// Personal answers carried the visitor's own marker; Anonymous ones
	// the anonymous page (AnonymousFromCache of them from the cache).
	Personal int64 `json:"personal"`
	// PersonalFromCache counts personal answers the server said came
	// from its cache: a personal page was stored (served back to its own
	// visitor here, but stored all the same).
	PersonalFromCache  int64 `json:"personal_from_cache"`
	Anonymous          int64 `json:"anonymous"`
	AnonymousFromCache int64 `json:"anonymous_from_cache"`
}

// ReplayResult is what a replay measured. Bytes are body bytes as they
// travelled (compressed when the answer was).
type ReplayResult struct {
	Scenario    string           `json:"scenario"`
	Seed        uint64           `json:"seed"`
	Requests    int64            `json:"requests"`
	Errors      int64            `json:"errors"` // transport failures and 5xx
	DurationS   float64          `json:"duration_s"`
	QPS         float64          `json:"qps"`
	Status      map[string]int64 `json:"status"`
	XCache      map[string]int64 `json:"x_cache"`
	FromCache   int64            `json:"from_cache"`
	HitRate     float64          `json:"hit_rate"` // FromCache / answers
	ClientBytes int64            `json:"client_bytes"`
	// Codings counts answers by Content-Encoding ("identity" for none).
	Codings map[string]int64       `json:"codings"`
	ByKind  map[string]*ReplayKind `json:"by_kind"`
	// Unaccepted counts answers in a coding the request did not accept,
	// Undecodable bodies that did not decode.
	Unaccepted  int64          `json:"unaccepted_coding"`
	Undecodable int64          `json:"undecodable"`
	LoggedIn    ReplayLoggedIn `json:"logged_in"`
	// Leaks counts answers that carried a session marker other than the
	// request's own (an anonymous request's included): a page made for
	// one signed-in visitor given to another client.
	Leaks        int64        `json:"leaks"`
	LeakExamples []string     `json:"leak_examples,omitempty"`
	Origin       *OriginStats `json:"origin,omitempty"`
	// CPUS is the server's user + system CPU seconds over the run
	// (/proc/<pid>/stat of CPUPids), CPUPerRequestUS per answer.
	CPUS            float64 `json:"cpu_s,omitempty"`
	CPUPerRequestUS float64 `json:"cpu_per_request_us,omitempty"`
}

type replayStats struct {
	ReplayResult
	errExamples []string
}

func newReplayStats() *replayStats {
	return &replayStats{ReplayResult: ReplayResult{Status: map[string]int64{}, XCache: map[string]int64{},
		Codings: map[string]int64{}, ByKind: map[string]*ReplayKind{}}}
}

func (c ReplayRun) validate() error {
	switch {
	case c.Replay == nil:
		return errors.New("no replay")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("--concurrency: must be between 1 and %d", MaxConcurrency)
	case c.Requests < 1 || c.Requests > 100_000_000:
		return errors.New("--requests: must be between 1 and 100000000")
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("--duration: must be > 0 and <= %s", MaxDuration)
	case c.Timeout <= 0:
		return errors.New("--timeout: must be > 0")
	}
	if err := CheckLoopback(c.Base); err != nil {
		return fmt.Errorf("--base: %w", err)
	}
	return nil
}

// RunReplay sends requests 0..Requests-1 of the replay to the server,
// each worker taking the next number, until all are answered or the
// duration is over.
func RunReplay(ctx context.Context, c ReplayRun) (*ReplayResult, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	tr := c.Transport
	if tr == nil {
		t := NewTransport(c.Concurrency)
		defer t.CloseIdleConnections()
		tr = t
	}
	client := NewClient(tr, c.Timeout)
	statsClient := NewClient(tr, 10*time.Second)
	if c.OriginStats != "" {
		if err := ResetOriginStats(ctx, statsClient, c.OriginStats); err != nil {
			return nil, err
		}
	}
	cpu0, err := cpuTicks(c.CPUPids)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	base := strings.TrimSuffix(c.Base, "/")
	var next atomic.Int64
	var mu sync.Mutex
	total := newReplayStats()
	start := time.Now()
	var wg sync.WaitGroup
	for range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := newReplayStats()
			for runCtx.Err() == nil {
				n := next.Add(1) - 1
				if n >= c.Requests {
					break
				}
				ws.one(runCtx, client, base, c.Replay.Request(uint64(n)))
			}
			mu.Lock()
			total.merge(ws)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res := &total.ReplayResult
	res.Scenario, res.Seed = "replay", c.Replay.cfg.Seed
	res.DurationS = time.Since(start).Seconds()
	if res.DurationS > 0 {
		res.QPS = float64(res.Requests) / res.DurationS
	}
	if answered := res.Requests - res.Status["error"]; answered > 0 {
		res.HitRate = float64(res.FromCache) / float64(answered)
	}
	if len(c.CPUPids) > 0 {
		cpu1, err := cpuTicks(c.CPUPids)
		if err != nil {
			return nil, err
		}
		res.CPUS = float64(cpu1-cpu0) / userHZ
		if res.Requests > 0 {
			res.CPUPerRequestUS = res.CPUS * 1e6 / float64(res.Requests)
		}
	}
	if c.OriginStats != "" {
		s, err := ReadOriginStats(ctx, statsClient, c.OriginStats)
		if err != nil {
			return nil, err
		}
		res.Origin = &s
	}
	return res, nil
}

// one sends one request of the replay and counts its answer. A request
// cut off by the end of the run is not counted.
func (ws *replayStats) one(ctx context.Context, client *http.Client, base string, rq ReplayRequest) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+rq.Path, nil)
	if err != nil {
		ws.fail("bad request: " + err.Error())
		return
	}
	req.Header = rq.Header.Clone()
	req.Host = rq.Host
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(resp.Body, maxReplayBody))
		resp.Body.Close()
	}
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil {
		ws.fail(err.Error())
		return
	}
	ws.answer(rq, resp, body)
}

func (ws *replayStats) fail(msg string) {
	ws.Requests++
	ws.Errors++
	ws.Status["error"]++
	if len(ws.errExamples) < 3 {
		ws.errExamples = append(ws.errExamples, msg)
	}
}

func (ws *replayStats) answer(rq ReplayRequest, resp *http.Response, body []byte) {
	ws.Requests++
	ws.Status[strconv.Itoa(resp.StatusCode)]++
	if resp.StatusCode >= 500 {
		ws.Errors++
	}
	xc := NormalizeXCache(resp.Header.Get("X-Cache"))
	ws.XCache[XCacheToken(xc)]++
	cached := ServedFromCache(XCacheToken(xc))
	k := ws.ByKind[rq.Kind]
	if k == nil {
		k = &ReplayKind{}
		ws.ByKind[rq.Kind] = k
	}
	k.Requests++
	k.ClientBytes += int64(len(body))
	ws.ClientBytes += int64(len(body))
	if cached {
		ws.FromCache++
		k.FromCache++
	}
	coding := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	if coding == "" {
		coding = "identity"
	}
	ws.Codings[coding]++
	if coding != "identity" && !acceptsCoding(rq.Header.Get("Accept-Encoding"), coding) {
		ws.Unaccepted++
	}
	plain, err := decode(coding, body)
	if err != nil {
		ws.Undecodable++
		return
	}
	ws.check(rq, plain, cached)
}

// check is the leak check: a body's session marker must be the request's
// own; a signed-in visitor's page or API answer is personal or anonymous.
func (ws *replayStats) check(rq ReplayRequest, plain []byte, cached bool) {
	own := false
	for _, m := range markerRE.FindAllSubmatch(plain, -1) {
		if string(m[1]) == rq.Session {
			own = true
			continue
		}
		ws.Leaks++
		if len(ws.LeakExamples) < 5 {
			ws.LeakExamples = append(ws.LeakExamples, fmt.Sprintf("visitor %d (session %q) asked %s%s and got the page of session %q",
				rq.Visitor, rq.Session, rq.Host, rq.Path, m[1]))
		}
	}
	if rq.Session == "" || (rq.Kind != "html" && rq.Kind != "json") {
		return
	}
	ws.LoggedIn.Requests++
	switch {
	case own:
		ws.LoggedIn.Personal++
		if cached {
			ws.LoggedIn.PersonalFromCache++
		}
	case bytes.Contains(plain, []byte("tc-anonymous")):
		ws.LoggedIn.Anonymous++
		if cached {
			ws.LoggedIn.AnonymousFromCache++
		}
	}
}

func (t *replayStats) merge(o *replayStats) {
	t.Requests += o.Requests
	t.Errors += o.Errors
	t.FromCache += o.FromCache
	t.ClientBytes += o.ClientBytes
	t.Unaccepted += o.Unaccepted
	t.Undecodable += o.Undecodable
	t.Leaks += o.Leaks
	t.LoggedIn.Requests += o.LoggedIn.Requests
	t.LoggedIn.Personal += o.LoggedIn.Personal
	t.LoggedIn.PersonalFromCache += o.LoggedIn.PersonalFromCache
	t.LoggedIn.Anonymous += o.LoggedIn.Anonymous
	t.LoggedIn.AnonymousFromCache += o.LoggedIn.AnonymousFromCache
	for _, m := range [][2]map[string]int64{{t.Status, o.Status}, {t.XCache, o.XCache}, {t.Codings, o.Codings}} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	for name, k := range o.ByKind {
		tk := t.ByKind[name]
		if tk == nil {
			tk = &ReplayKind{}
			t.ByKind[name] = tk
		}
		tk.Requests += k.Requests
		tk.FromCache += k.FromCache
		tk.ClientBytes += k.ClientBytes
	}
	for _, e := range o.LeakExamples {
		if len(t.LeakExamples) < 5 {
			t.LeakExamples = append(t.LeakExamples, e)
		}
	}
	for _, e := range o.errExamples {
		if len(t.errExamples) < 3 {
			t.errExamples = append(t.errExamples, e)
		}
	}
}

// acceptsCoding reports whether Accept-Encoding ae admits coding
// (RFC 9110 §12.5.3; x-gzip is gzip).
func acceptsCoding(ae, coding string) bool {
	star := false
	for _, part := range strings.Split(ae, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "x-gzip" {
			name = "gzip"
		}
		refused := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		ok := !(refused == "q=0" || refused == "q=0.0" || refused == "q=0.00" || refused == "q=0.000")
		if name == coding {
			return ok
		}
		if name == "*" {
			star = ok
		}
	}
	return star
}

// decode undoes a Content-Encoding, bounded to maxReplayBody.
func decode(coding string, body []byte) ([]byte, error) {
	var r io.Reader
	switch coding {
	case "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "deflate":
		r = flate.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("unknown coding %q", coding)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxReplayBody+1))
	if err == nil && len(out) > maxReplayBody {
		err = fmt.Errorf("decodes to more than %d bytes", maxReplayBody)
	}
	return out, err
}

// userHZ is the unit of /proc/<pid>/stat's times on Linux (USER_HZ).
const userHZ = 100

// cpuTicks sums utime + stime of the processes; a process that is gone
// counts 0.
func cpuTicks(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("--cpu-pid %d: %w", pid, err)
		}
		// After the command name's closing parenthesis: state is field 3,
		// utime field 14 and stime field 15.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			return 0, fmt.Errorf("--cpu-pid %d: unexpected /proc stat", pid)
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("--cpu-pid %d: unexpected /proc stat", pid)
		}
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("--cpu-pid %d: %w", pid, err)
			}
			sum += n
		}
	}
	return sum, nil
}

// WriteText prints the result for a person.
func (r *ReplayResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "replay        seed %d: %d requests in %.1fs (%.0f/s), %d errors\n", r.Seed, r.Requests, r.DurationS, r.QPS, r.Errors)
	fmt.Fprintf(w, "from cache    %.1f%% (HIT, STALE or UPDATING); X-Cache %s\n", 100*r.HitRate, formatCounts(r.XCache))
	for _, k := range []string{"html", "json", "css", "js", "image"} {
		if b := r.ByKind[k]; b != nil && b.Requests > 0 {
			fmt.Fprintf(w, "  %-5s       %d requests, %.1f%% from cache, %d bytes to clients\n", k, b.Requests, 100*float64(b.FromCache)/float64(b.Requests), b.ClientBytes)
		}
	}
	fmt.Fprintf(w, "to clients    %d body bytes; codings %s; %d in a coding not accepted, %d undecodable\n", r.ClientBytes, formatCounts(r.Codings), r.Unaccepted, r.Undecodable)
	if r.Origin != nil {
		fmt.Fprintf(w, "origin        %d requests, %d body bytes\n", r.Origin.Requests, r.Origin.Bytes)
	}
	if r.CPUS > 0 {
		fmt.Fprintf(w, "server CPU    %.2fs, %.0f µs per request\n", r.CPUS, r.CPUPerRequestUS)
	}
	li := r.LoggedIn
	fmt.Fprintf(w, "signed in     %d page/API requests: %d personal (%d from cache), %d anonymous (%d from cache)\n",
		li.Requests, li.Personal, li.PersonalFromCache, li.Anonymous, li.AnonymousFromCache)
	if r.Leaks == 0 {
		fmt.Fprintln(w, "LEAK CHECK    ok: no client received another session's page")
		return
	}
	fmt.Fprintf(w, "LEAK CHECK    FAILED: %d answers carried another session's marker\n", r.Leaks)
	for _, e := range r.LeakExamples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

// ErrLeak is returned by the replay command when the leak check failed.
var ErrLeak = errors.New("leak check failed: a client received a page made for another session")
