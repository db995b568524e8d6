package accesslog

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSuffix(l.b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func compiled(t testing.TB, a tierconfig.AccessLog) *tierconfig.Compiled {
	t.Helper()
	c := tierconfig.Default()
	c.AccessLog = a
	cc, err := tierconfig.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func closeLogger(t testing.TB, l *Logger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func request(target string) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = "10.1.2.3:5555"
	return r
}

var okEntry = Entry{End: time.Unix(1700000000, 0), Duration: time.Millisecond, Status: 200, Bytes: 5, Result: "hit", Layer: "l1"}

func TestPolicy(t *testing.T) {
	tests := map[string]struct {
		defaults Defaults
		tier     tierconfig.AccessLog
		target   string
		status   int
		logged   bool
	}{
		"on by default": {DefaultDefaults(), tierconfig.AccessLog{}, "/a", 200, true},
		"the flag turns it off when the tier says nothing":       {Defaults{SamplePercent: 100}, tierconfig.AccessLog{}, "/a", 200, false},
		"the tier turns it on over the flag":                     {Defaults{SamplePercent: 100}, tierconfig.AccessLog{Enabled: ptr(true)}, "/a", 200, true},
		"the tier turns it off over the flag":                    {DefaultDefaults(), tierconfig.AccessLog{Enabled: ptr(false)}, "/a", 500, false},
		"an exact exclusion drops that path":                     {DefaultDefaults(), tierconfig.AccessLog{ExcludePaths: []string{"/healthz"}}, "/healthz?x=1", 200, false},
		"an exact exclusion keeps longer paths":                  {DefaultDefaults(), tierconfig.AccessLog{ExcludePaths: []string{"/healthz"}}, "/healthz/deep", 200, true},
		"a prefix exclusion drops what starts with it":           {DefaultDefaults(), tierconfig.AccessLog{ExcludePaths: []string{"/static/*"}}, "/static/a.css", 200, false},
		"the flag's exclusions apply when the tier has none":     {Defaults{Enabled: true, SamplePercent: 100, ExcludePaths: []string{"/metrics"}}, tierconfig.AccessLog{}, "/metrics", 200, false},
		"the tier's exclusions replace the flag's":               {Defaults{Enabled: true, SamplePercent: 100, ExcludePaths: []string{"/metrics"}}, tierconfig.AccessLog{ExcludePaths: []string{}}, "/metrics", 200, true},
		"a prefix exclusion keeps a path that climbs out of it":  {DefaultDefaults(), tierconfig.AccessLog{ExcludePaths: []string{"/internal/*"}}, "/internal/../admin", 200, true},
		"a prefix exclusion keeps an encoded climb out of it":    {DefaultDefaults(), tierconfig.AccessLog{ExcludePaths: []string{"/internal/*"}}, "/internal/..%2fadmin", 200, true},
		"a prefix exclusion drops a path every reading is under": {DefaultDefaults(), tierconfig.AccessLog{ExcludePaths: []string{"/internal/*"}}, "/internal/a/../b%20c", 200, false},
		"a 5xx is logged whatever the sampling":                  {Defaults{Enabled: true, SamplePercent: 1}, tierconfig.AccessLog{}, "/a", 503, true},
		"a 2xx not drawn by sampling is not logged":              {Defaults{Enabled: true, SamplePercent: 1}, tierconfig.AccessLog{}, "/a", 200, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := &lockedBuffer{}
			// The source draws 99: only a 100 percent sample takes it.
			l, err := New(Options{Writer: out, Defaults: tc.defaults, Rand: func() uint64 { return 99 }})
			if err != nil {
				t.Fatal(err)
			}
			e := okEntry
			e.Status = tc.status
			l.Log(request(tc.target), compiled(t, tc.tier), &e)
			closeLogger(t, l)
			if got := len(out.lines()) == 1; got != tc.logged {
				t.Fatalf("logged %v, want %v", got, tc.logged)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Sampling draws from the source: with a counter as source, a 25 percent
// sample logs exactly the requests that drew 0 to 24 of each 100.
func TestSampling(t *testing.T) {
	out := &lockedBuffer{}
	var n atomic.Uint64
	l, err := New(Options{Writer: out, Defaults: DefaultDefaults(), Rand: func() uint64 { return n.Add(1) - 1 }})
	if err != nil {
		t.Fatal(err)
	}
	c := compiled(t, tierconfig.AccessLog{SamplePercent: 25})
	for i := range 400 {
		l.Log(request("/n"+string(rune('a'+i%26))), c, &okEntry)
	}
	closeLogger(t, l)
	if got := len(out.lines()); got != 100 {
		t.Fatalf("%d lines of 400 requests at 25 percent, want 100", got)
	}
}

// A writer that does not return never holds a request up: lines past
// the buffer are dropped and counted, and every line is either written
// or counted once the writer returns.
func TestSlowWriterNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var written atomic.Int64
	w := writerFunc(func(p []byte) (int, error) {
		<-release
		written.Add(int64(bytes.Count(p, []byte("\n"))))
		return len(p), nil
	})
	l, err := New(Options{Writer: w, Defaults: DefaultDefaults(), BufferSize: 4 << 10, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := compiled(t, tierconfig.AccessLog{})
	const total = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range total {
			l.Log(request("/a"), c, &okEntry)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests blocked on a writer that does not return")
	}
	dropped := testutil.ToFloat64(l.dropped)
	if dropped == 0 {
		t.Fatal("nothing dropped although the writer never returned")
	}
	close(release)
	closeLogger(t, l)
	if got := written.Load() + int64(testutil.ToFloat64(l.dropped)); got != total {
		t.Fatalf("written %d + dropped %v = %d, want %d", written.Load(), testutil.ToFloat64(l.dropped), got, total)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The line carries the request's fields in slog's JSON shape: the same
// object slog's JSON handler writes for the same attributes.
func TestLineMatchesSlog(t *testing.T) {
	out := &lockedBuffer{}
	l, err := New(Options{Writer: out, Defaults: DefaultDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	r := request("/p")
	r.RequestURI = "/p\"ä\x01\xff?page=2&token=s3cret&a=1;page=3"
	r.Host = "shop.example"
	r.Header.Set("X-Forwarded-For", "1.1.1.1, 203.0.113.9")
	r.Header.Set("Authorization", "Bearer authsecret")
	e := Entry{End: time.Unix(1700000000, 123e6).UTC(), Duration: 1500 * time.Microsecond, Status: 200, Bytes: 512,
		Result: "miss", Layer: "origin", Rule: "api", OriginTime: 1200 * time.Microsecond}
	l.Log(r, compiled(t, tierconfig.AccessLog{QueryParams: []string{"page"}, TrustForwardedFor: true}), &e)
	closeLogger(t, l)
	lines := out.lines()
	if len(lines) != 1 {
		t.Fatalf("%d lines", len(lines))
	}
	var ref bytes.Buffer
	slog.New(slog.NewJSONHandler(&ref, nil)).LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("method", "GET"), slog.String("host", "shop.example"), slog.String("path", "/p\"ä\x01\xff"),
		slog.String("query", "page=2"), slog.Int("status", 200), slog.Int64("bytes", 512),
		slog.Float64("duration", 0.0015), slog.String("result", "miss"), slog.String("layer", "origin"),
		slog.String("rule", "api"), slog.Float64("origin_time", 0.0012), slog.String("client", "203.0.113.9"))
	var got, want map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("%q: %v", lines[0], err)
	}
	if err := json.Unmarshal(ref.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	want["time"] = "2023-11-14T22:13:20.123Z"
	if g, w := mustJSON(got), mustJSON(want); g != w {
		t.Fatalf("line\n%s\nwant (slog)\n%s", g, w)
	}
	if strings.Contains(lines[0], "s3cret") || strings.Contains(lines[0], "authsecret") {
		t.Fatalf("secret in %s", lines[0])
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// Close writes what waits, however long the flush interval.
func TestCloseFlushes(t *testing.T) {
	out := &lockedBuffer{}
	l, err := New(Options{Writer: out, Defaults: DefaultDefaults(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(request("/a"), compiled(t, tierconfig.AccessLog{}), &okEntry)
	closeLogger(t, l)
	if n := len(out.lines()); n != 1 {
		t.Fatalf("%d lines after Close, want 1", n)
	}
}

var _ io.Writer = writerFunc(nil)
