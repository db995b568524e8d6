package originconn

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// exchange builds a response stream from pieces near the edges of HTTP/1.1
// response framing: lengths off by one, odd spellings of the framing
// fields, interim responses, chunk sizes and extensions, trailers, line
// ends, folded lines; then bytes past it that look like a response.
func exchange(rng *rand.Rand) (stream string, head bool) {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	maybe := func(p float64, s string) string {
		if rng.Float64() < p {
			return s
		}
		return ""
	}
	var b strings.Builder
	eol := pick("\r\n", "\r\n", "\r\n", "\n")
	for range rng.IntN(3) {
		if rng.IntN(3) == 0 {
			b.WriteString(pick("HTTP/1.1 100 Continue", "HTTP/1.1 103 Early Hints", "HTTP/1.1 102") + eol +
				maybe(0.5, "Link: </a>"+eol) + eol)
		}
	}
	b.WriteString(pick("HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "HTTP/2.0", "http/1.1") + " " +
		pick("200 OK", "200 OK", "200", "204 No Content", "304 Not Modified", "404 Not Found", "101 Switching Protocols", "20 OK", "2000 OK", " 200 OK") + eol)
	bodyLen := rng.IntN(6)
	chunked := false
	for range rng.IntN(4) {
		switch rng.IntN(7) {
		case 0, 1:
			n := max(bodyLen+[]int{0, 0, 0, 1, -1}[rng.IntN(5)], 0)
			b.WriteString(pick("Content-Length", "content-length", "CONTENT-LENGTH", "Content-Length ") + ":" +
				pick(" ", "", "\t", "  ") + pick("", "", "0", "+", "-") + strconv.Itoa(n) + pick("", " ", "\t", ",5") + eol)
		case 2:
			b.WriteString(pick("Transfer-Encoding", "transfer-encoding") + ":" +
				pick(" chunked", "chunked", " Chunked ", " gzip", " gzip, chunked", " chunked, chunked", "", " chunked\r\n chunked") + eol)
			chunked = true
		case 3:
			b.WriteString("X-Fold: a" + eol + pick(" b", "\tb") + eol)
		case 4:
			b.WriteString(pick("Connection: keep-alive", "Connection: close", "Upgrade: websocket", "Trailer: X-T") + eol)
		case 5:
			b.WriteString(pick(" X-Lead: 1", "X-Other: HTTP/1.1 200 OK", "Bad Name: 1", "X-Empty:") + eol)
		default:
			b.WriteString("Content-Length: " + strconv.Itoa(bodyLen) + eol + "Content-Length: " + strconv.Itoa(bodyLen+rng.IntN(2)) + eol)
		}
	}
	b.WriteString(eol)
	if chunked {
		for range rng.IntN(3) {
			n := 1 + rng.IntN(5)
			b.WriteString(strconv.FormatInt(int64(n+rng.IntN(3)-1), 16) +
				maybe(0.2, pick(";ext", ";e=\"v\"", " ", " ;x", "\t")) + pick("\r\n", "\r\n", "\r\n", "\n", "\r\r\n") +
				strings.Repeat("z", n) + pick("\r\n", "\r\n", "\r\n", "\n", ""))
		}
		b.WriteString(pick("0", "0", "00", "0;ext") + pick("\r\n", "\r\n", "\n"))
		b.WriteString(maybe(0.3, pick("X-T: 1\r\n", "X-T: 1\n", "HTTP/1.1 200 OK\r\n", "Bad Name: 1\r\n", " fold\r\n")))
		b.WriteString(pick("\r\n", "\r\n", "\n", ""))
	} else {
		src := pick("zzzzz", "HTTP/1.1 200 OK\r\n\r\n", "0\r\n\r\n", "\r\nzzz")
		b.WriteString(src[:min(bodyLen, len(src))])
	}
	b.WriteString(past)
	return b.String(), rng.IntN(5) == 0
}

// counting counts the bytes read through it.
type counting struct {
	r io.Reader
	n int
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// netHTTPReads reads one exchange of stream as the Transport does: the
// responses up to the final one (skipping 1xx but 101), and its body.
// reused reports that the Transport would put the connection back to
// carry another request, at position end; read reports that it read the
// final response without error (reused or not).
func netHTTPReads(stream string, head bool) (end int, read, reused bool) {
	src := &counting{r: strings.NewReader(stream)}
	br := bufio.NewReaderSize(src, 4096)
	method := http.MethodGet
	if head {
		method = http.MethodHead
	}
	req := &http.Request{Method: method}
	for range 10 {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return 0, false, false
		}
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != 101 {
			continue
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, false, false
		}
		end = src.n - br.Buffered()
		return end, true, !resp.Close && resp.StatusCode != 101
	}
	return 0, false, false
}

// checkAgrees fails t when the framer and net/http disagree on stream:
// where net/http reuses the connection, the framer must end the exchange
// at the same byte or give up; where net/http reads the response, the
// framer must never end it anywhere else (that would cut the response).
func checkAgrees(t *testing.T, stream string, head bool) (lost bool) {
	t.Helper()
	end, read, reused := netHTTPReads(stream, head)
	for _, size := range []int{0, 1, 3} {
		got, st := feedAll(stream, head, size)
		switch {
		case got == -2:
			t.Fatalf("the framer consumed less than it was fed without ending (pieces of %d): %q", size, stream)
		case got >= 0 && read && got != end:
			t.Fatalf("the framer ends the exchange at %d, net/http at %d (pieces of %d, head %t): %q", got, end, size, head, stream)
		case reused && got < 0 && st != fsLost:
			t.Fatalf("net/http reuses the connection after %d bytes; the framer passes bytes through (state %d, pieces of %d, head %t): %q",
				end, st, size, head, stream)
		case reused && st == fsLost:
			lost = true
		}
	}
	return lost
}

// TestTheFramerAgreesWithNetHTTP runs checkAgrees over generated exchanges
// with a fixed seed. The framer may give up on an exchange that net/http
// would reuse the connection after (odd framing the framer refuses to
// guess at, such as "Content-Length: +5"): that connection is closed
// instead of reused, which costs a reconnect, never a wrong answer. The
// test bounds how often: at most 1 in 100 reusable exchanges (14 of 3163
// with this seed when written).
func TestTheFramerAgreesWithNetHTTP(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(13, 1))
	lost, reusable := 0, 0
	for range n {
		stream, head := exchange(rng)
		if checkAgrees(t, stream, head) {
			lost++
		}
		if _, _, reused := netHTTPReads(stream, head); reused {
			reusable++
		}
	}
	t.Logf("%d exchanges, %d reusable by net/http, %d of them given up by the framer", n, reusable, lost)
	if reusable < n/20 {
		t.Fatalf("only %d of %d generated exchanges are reusable by net/http: the generator no longer makes ordinary exchanges", reusable, n)
	}
	if lost*100 > reusable {
		t.Fatalf("the framer gives up on %d of the %d exchanges net/http reuses the connection after (more than 1 in 100): each costs a reconnect", lost, reusable)
	}
}

func FuzzFramer(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 64 {
		stream, head := exchange(rng)
		f.Add(stream, head)
	}
	f.Fuzz(func(t *testing.T, stream string, head bool) {
		checkAgrees(t, stream, head)
	})
}
