package connguard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
)

// FuzzTracker feeds arbitrary streams to the tracker and checks that
//   - it never panics and its queue stays bounded;
//   - its state does not depend on how the stream is split into reads;
//   - it agrees with net/http on request boundaries: every header block
//     it records up to its first refusal carries the request line of the
//     request net/http parses at that position, and while it is still
//     following the stream it has seen every request net/http parsed.
func FuzzTracker(f *testing.F) {
	for _, tc := range trackerCases {
		if len(tc.stream) < 8<<10 {
			f.Add([]byte(tc.stream), uint64(1))
		}
	}
	f.Add([]byte(getA+chunked+getA), uint64(7))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\r\n\r\n\n\r"+getA), uint64(3))
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 64 {
		f.Add([]byte(conversation(rng)), uint64(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		if len(data) > 64<<10 {
			t.Skip()
		}
		if p := streamProblem(data, seed); p != "" {
			t.Fatal(p)
		}
	})
}

// streamProblem runs FuzzTracker's checks on one stream; it returns ""
// or what went wrong.
func streamProblem(data []byte, seed uint64) string {
	whole := newTracker()
	whole.feed(data)
	if n := whole.pending(); n > maxPending {
		return fmt.Sprintf("%d results pending, bound is %d", n, maxPending)
	}

	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	split := newTracker()
	feedSplit(split, data, func() int { return 1 + rng.IntN(32) })
	if !reflect.DeepEqual(split, whole) {
		return fmt.Sprintf("split reads: %+v, one read: %+v", outcomeOf(split), outcomeOf(whole))
	}

	lines := netHTTPRequestLines(data)
	whole.mu.Lock()
	results := blocksOf(whole)
	dead := whole.st == stDead
	whole.mu.Unlock()
	for i, r := range results {
		if i >= len(lines) || r.anyLine {
			break
		}
		if h := requestLineHash(lines[i].method, lines[i].uri, lines[i].proto); h != r.line {
			return fmt.Sprintf("header block %d does not match net/http's request %d %+v", i, i, lines[i])
		}
		if r.verdict != allowed {
			break // refused with Connection: close; nothing after it is served
		}
	}
	allAllowed := true
	for _, r := range results {
		allAllowed = allAllowed && r.verdict == allowed
	}
	if !dead && allAllowed && len(lines) > len(results) {
		return fmt.Sprintf("net/http parsed %d requests, tracker saw %d header blocks", len(lines), len(results))
	}
	return ""
}

type requestLine struct{ method, uri, proto string }

// netHTTPRequestLines reads data the way net/http's server loop does:
// same reader size, the same tolerance for CR/LF after a POST, and it
// carries on after a body error as the server may. It stops when a read
// needs bytes past the end of data.
func netHTTPRequestLines(data []byte) []requestLine {
	br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	var lines []requestLine
	last := ""
	for {
		if last == "POST" {
			peek, _ := br.Peek(postCRLFSlack)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return lines
		}
		lines = append(lines, requestLine{req.Method, req.RequestURI, req.Proto})
		last = req.Method
		if _, err := io.Copy(io.Discard, req.Body); errors.Is(err, io.ErrUnexpectedEOF) {
			return lines
		}
	}
}
