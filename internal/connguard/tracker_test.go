package connguard

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// outcome is what the tracker recorded for a byte stream.
type outcome struct {
	verdicts []verdict
	dead     bool
	preface  bool
	opened   bool
}

func outcomeOf(t *tracker) outcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := outcome{dead: t.st == stDead, preface: t.preface, opened: t.opened}
	for _, r := range blocksOf(t) {
		o.verdicts = append(o.verdicts, r.verdict)
	}
	return o
}

// blocksOf lists the queued results one per header block, undoing push's
// merging of identical OPTIONS *. t.mu must be held.
func blocksOf(t *tracker) []result {
	var rs []result
	for _, r := range t.q[t.head:] {
		for range r.repeats + 1 {
			rs = append(rs, r)
		}
	}
	return rs
}

func feedString(t *tracker, s string) { t.feed([]byte(s)) }

const (
	getA    = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	chunked = "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5;name=val\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\nX-Other: two\r\n\r\n"
)

var trackerCases = []struct {
	name   string
	stream string
	want   outcome
}{
	{
		name:   "a GET without a body is allowed",
		stream: getA,
		want:   outcome{verdicts: []verdict{allowed}},
	},
	{
		name: "a Content-Length body is skipped by its length, even when it looks like a request",
		stream: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 27\r\n\r\n" +
			"GET /b HTTP/1.1\r\nHost: x\r\n\r\n" + getA,
		want: outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "a chunked body with extensions and trailers is followed to its end",
		stream: chunked + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "a chunked body without trailers is followed to its end",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "Transfer-Encoding matching is case-insensitive and trims whitespace, as net/http's",
		stream: "POST / HTTP/1.1\r\nHost: x\r\ntransfer-ENCODING: \tChunked \r\n\r\n0\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "bare LF line endings in the header block are accepted, as net/http accepts them",
		stream: "GET / HTTP/1.1\nHost: x\nContent-Length: 2\n\nhi" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "repeated identical Content-Length lines are allowed",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length:  3 \r\n\r\nabc" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "obs-fold in an unrelated field is allowed",
		stream: "GET / HTTP/1.1\r\nHost: x\r\nX-Long: a\r\n b\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "after a POST up to four CR or LF bytes before the next request are skipped",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "after a GET an empty line before the next request is malformed",
		stream: getA + "\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "Content-Length with Transfer-Encoding is suspicious",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{bothLengths, allowed}},
	},
	{
		name:   "Transfer-Encoding before Content-Length, in odd capitals, is suspicious",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTRANSFER-encoding: chunked\r\ncontent-LENGTH: 3\r\n\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{bothLengths}},
	},
	{
		name:   "Content-Length 0 with Transfer-Encoding is suspicious",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{bothLengths}},
	},
	{
		name:   "two Transfer-Encoding lines are suspicious and end tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{multipleTE}, dead: true},
	},
	{
		name:   "a Transfer-Encoding list is suspicious and ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{unsupportedTE}, dead: true},
	},
	{
		name:   "differing Content-Length lines are suspicious and end tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd" + getA,
		want:   outcome{verdicts: []verdict{conflictingCL}, dead: true},
	},
	{
		name:   "an invalid Content-Length ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc" + getA,
		want:   outcome{verdicts: []verdict{unverifiable}, dead: true},
	},
	{
		name:   "an HTTP/1.0 request with Transfer-Encoding is suspicious and framed by Content-Length",
		stream: "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{teInHTTP10, allowed}},
	},
	{
		name:   "obs-fold in Transfer-Encoding ends tracking before the verdict",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
		want:   outcome{dead: true},
	},
	{
		name: "a smuggled request inside a conflicting body is seen as net/http sees it",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n",
		want: outcome{verdicts: []verdict{bothLengths, allowed}},
	},
	{
		name:   "a chunk-size line ending in bare LF ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "a chunk size with leading whitespace ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n 3\r\nabc\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "whitespace between chunk size and extension ends tracking, as in net/http",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3 ;a\r\nabc\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "trailing whitespace after a chunk size is accepted",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3 \t\r\nabc\r\n0\r\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed, allowed}},
	},
	{
		name:   "a chunk size of seventeen hex digits ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000003\r\nabc\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "chunk data not followed by CRLF ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "a trailer line ending in bare LF ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\n\r\n" + getA,
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "a trailer line without a colon ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nGET /admin HTTP/1.1\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name: "a trailer section longer than net/http's buffer ends tracking",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " +
			strings.Repeat("a", maxTrailer) + "\r\n\r\n" + getA,
		want: outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name: "too much chunk overhead ends tracking, as net/http's limit does",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strings.Repeat("1;"+strings.Repeat("e", 200)+"\r\nA\r\n", 100) + "0\r\n\r\n",
		want: outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "the HTTP/2 preface ends tracking and marks the connection as HTTP/2",
		stream: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00",
		want:   outcome{dead: true, preface: true, opened: true},
	},
	{
		name:   "a preface after a request marks HTTP/2 but not a connection opened with it",
		stream: "GET / HTTP/1.1\r\nHost: x\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true, preface: true},
	},
	{
		name:   "PRI with header fields ends tracking without marking HTTP/2",
		stream: "PRI * HTTP/2.0\r\nHost: x\r\n\r\n",
		want:   outcome{dead: true},
	},
	{
		name:   "an invalid method ends tracking",
		stream: "G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
		want:   outcome{dead: true},
	},
	{
		name:   "an unsupported protocol version ends tracking",
		stream: "GET / HTTP/3.0\r\nHost: x\r\n\r\n",
		want:   outcome{dead: true},
	},
	{
		name:   "a CR inside a header line ends tracking",
		stream: "GET / HTTP/1.1\r\nContent-Length: 1\r2\r\n\r\n",
		want:   outcome{dead: true},
	},
	{
		name:   "a header block over the bound stops tracking without a suspicious verdict",
		stream: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeaderBlock) + "\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "a request-target over the bound stops tracking without a suspicious verdict",
		stream: "GET /" + strings.Repeat("a", maxHeaderBlock) + " HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed}, dead: true},
	},
	{
		name:   "a long request-target is followed to the framing after it",
		stream: "GET /" + strings.Repeat("a", 8<<10) + "?q=1 HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{bothLengths}},
	},
	{
		name:   "more header blocks than net/http can leave unread end tracking",
		stream: strings.Repeat(getA, maxPending+1),
		want:   outcome{verdicts: repeatVerdict(allowed, maxPending), dead: true},
	},
	{
		name:   "more identical OPTIONS * requests than the queue holds are followed",
		stream: strings.Repeat("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 3*maxPending) + getA,
		want:   outcome{verdicts: repeatVerdict(allowed, 3*maxPending+1)},
	},
	{
		name:   "a suspicious OPTIONS * is not merged into the run before it",
		stream: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nOPTIONS * HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		want:   outcome{verdicts: []verdict{allowed, bothLengths}},
	},
}

func repeatVerdict(v verdict, n int) []verdict {
	vs := make([]verdict, n)
	for i := range vs {
		vs[i] = v
	}
	return vs
}

func TestTrackerVerdicts(t *testing.T) {
	for _, tc := range trackerCases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			feedString(tr, tc.stream)
			if got := outcomeOf(tr); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// feedSplit feeds s in pieces whose lengths next chooses.
func feedSplit(tr *tracker, s []byte, next func() int) {
	for len(s) > 0 {
		n := min(max(next(), 1), len(s))
		tr.feed(s[:n])
		s = s[n:]
	}
}

// TestTrackerIsResumableAtAnyByte checks the whole tracker state, not
// just the verdicts: however the stream is split, the tracker ends in the
// same place.
func TestTrackerIsResumableAtAnyByte(t *testing.T) {
	var conversation strings.Builder
	for _, tc := range trackerCases {
		if !tc.want.dead {
			conversation.WriteString(tc.stream)
		}
	}
	streams := map[string]string{"every live case in one conversation": conversation.String()}
	for _, tc := range trackerCases {
		streams[tc.name] = tc.stream
	}
	for name, s := range streams {
		t.Run(name, func(t *testing.T) {
			whole := newTracker()
			whole.feed([]byte(s))

			bytewise := newTracker()
			feedSplit(bytewise, []byte(s), func() int { return 1 })

			rng := rand.New(rand.NewPCG(1, 2))
			random := newTracker()
			feedSplit(random, []byte(s), func() int { return 1 + rng.IntN(64) })

			for split, tr := range map[string]*tracker{"byte by byte": bytewise, "random chunks": random} {
				if !reflect.DeepEqual(tr, whole) {
					t.Errorf("%s: state %+v differs from one read: %+v", split, outcomeOf(tr), outcomeOf(whole))
				}
			}
		})
	}
	if o := outcomeOf(func() *tracker { tr := newTracker(); feedString(tr, conversation.String()); return tr }()); o.dead {
		t.Fatalf("the combined conversation should stay tracked, got %+v", o)
	}
}

func TestTakeMatchesRequestsToHeaderBlocks(t *testing.T) {
	line := func(m, u, p string) uint64 { return requestLineHash(m, u, p) }
	tests := []struct {
		name   string
		stream string
		takes  []uint64
		want   []verdict
	}{
		{
			name:   "requests are matched in order",
			stream: getA + "GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
			takes:  []uint64{line("GET", "/a", "HTTP/1.1"), line("GET", "/b", "HTTP/1.1")},
			want:   []verdict{allowed, allowed},
		},
		{
			name:   "a request net/http did not announce to the tracker is unverifiable",
			stream: getA,
			takes:  []uint64{line("GET", "/b", "HTTP/1.1")},
			want:   []verdict{unverifiable},
		},
		{
			name:   "a request after the tracker gave up is unverifiable",
			stream: getA + "\r\n" + getA,
			takes:  []uint64{line("GET", "/a", "HTTP/1.1"), line("GET", "/a", "HTTP/1.1")},
			want:   []verdict{allowed, unverifiable},
		},
		{
			name:   "an OPTIONS * answered by net/http itself is skipped",
			stream: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + getA,
			takes:  []uint64{line("GET", "/a", "HTTP/1.1")},
			want:   []verdict{allowed},
		},
		{
			name:   "an OPTIONS * that reaches the middleware is matched",
			stream: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + getA,
			takes:  []uint64{line("OPTIONS", "*", "HTTP/1.1"), line("GET", "/a", "HTTP/1.1")},
			want:   []verdict{allowed, allowed},
		},
		{
			name:   "a run of identical OPTIONS * answered by net/http is skipped whole",
			stream: strings.Repeat("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 5) + getA,
			takes:  []uint64{line("GET", "/a", "HTTP/1.1")},
			want:   []verdict{allowed},
		},
		{
			name:   "each OPTIONS * of a run that reaches the middleware is matched",
			stream: strings.Repeat("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 3) + getA,
			takes: []uint64{
				line("OPTIONS", "*", "HTTP/1.1"), line("OPTIONS", "*", "HTTP/1.1"), line("OPTIONS", "*", "HTTP/1.1"),
				line("GET", "/a", "HTTP/1.1"),
			},
			want: []verdict{allowed, allowed, allowed, allowed},
		},
		{
			name:   "a request beyond a run of OPTIONS * that reached the middleware is unverifiable",
			stream: strings.Repeat("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 2),
			takes: []uint64{
				line("OPTIONS", "*", "HTTP/1.1"), line("OPTIONS", "*", "HTTP/1.1"), line("OPTIONS", "*", "HTTP/1.1"),
			},
			want: []verdict{allowed, allowed, unverifiable},
		},
		{
			name: "a suspicious OPTIONS * answered by net/http refuses the next request",
			stream: "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
				getA,
			takes: []uint64{line("GET", "/a", "HTTP/1.1")},
			want:  []verdict{bothLengths},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			feedString(tr, tc.stream)
			for i, h := range tc.takes {
				if got := tr.take(1, h); got != tc.want[i] {
					t.Errorf("take %d = %v, want %v", i, got, tc.want[i])
				}
			}
		})
	}
}

func TestTakeHTTP2(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   verdict
	}{
		{"an HTTP/2 request on a connection that sent the preface is allowed", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", allowed},
		{"an HTTP/2 request without the preface is unverifiable", "PRI * HTTP/2.0\r\nHost: x\r\n\r\n", unverifiable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			feedString(tr, tc.stream)
			if got := tr.take(2, requestLineHash("PRI", "*", "HTTP/2.0")); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTrackerQueueStaysBounded feeds floods that no handler takes from:
// whatever a client sends, the queue and its backing array stop at
// maxPending results.
func TestTrackerQueueStaysBounded(t *testing.T) {
	const shortest = "M  HTTP/1.0\n\n"
	if len(shortest) != minHeaderBlock {
		t.Fatalf("shortest header block is %d bytes, minHeaderBlock says %d", len(shortest), minHeaderBlock)
	}
	tests := []struct {
		name     string
		block    string
		wantDead bool
		wantLen  int
	}{
		{"a flood of the shortest header blocks ends tracking at the bound", shortest, true, maxPending},
		{"a flood of GETs ends tracking at the bound", getA, true, maxPending},
		{
			"a flood of OPTIONS * alternating between versions ends tracking at the bound",
			"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nOPTIONS * HTTP/1.0\r\n\r\n", true, maxPending,
		},
		{"a flood of identical OPTIONS * stays one result", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			chunk := []byte(strings.Repeat(tc.block, 4096/len(tc.block)+1))
			for range 1 << 20 / len(chunk) { // about 1 MiB in 4 KiB reads
				tr.feed(chunk)
			}
			tr.mu.Lock()
			dead, n, c := tr.st == stDead, len(tr.q)-tr.head, cap(tr.q)
			tr.mu.Unlock()
			if dead != tc.wantDead || n != tc.wantLen {
				t.Errorf("dead %v with %d results, want dead %v with %d", dead, n, tc.wantDead, tc.wantLen)
			}
			if c > maxPending {
				t.Errorf("queue capacity %d exceeds maxPending %d", c, maxPending)
			}
		})
	}
}

// TestMaxPendingCoversNetHTTPReadAhead states the bound's arithmetic: a
// full read-ahead of the shortest blocks, plus the request being served,
// fits.
func TestMaxPendingCoversNetHTTPReadAhead(t *testing.T) {
	tr := newTracker()
	feedString(tr, getA+strings.Repeat("M  HTTP/1.0\n\n", netHTTPReadAhead/minHeaderBlock))
	if o := outcomeOf(tr); o.dead {
		t.Fatalf("tracker gave up within net/http's read-ahead: %d results", len(o.verdicts))
	}
}

func TestADetachedConnectionIsNoLongerFollowed(t *testing.T) {
	c := &conn{t: tracker{limit: noLimit}}
	ctx := ConnContext(context.Background(), c)
	c.t.feed([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	if got := c.t.take(1, requestLineHash("GET", "/", "HTTP/1.1")); got != allowed {
		t.Fatalf("before detaching: %v", got)
	}
	Detach(ctx)
	// A WebSocket peer's frames may look like anything, requests included.
	c.t.feed([]byte("GET /x HTTP/1.1\r\nHost: a\r\n\r\nPOST /y HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"))
	if n := c.t.pending(); n != 0 {
		t.Fatalf("a detached connection queued %d results", n)
	}
}
