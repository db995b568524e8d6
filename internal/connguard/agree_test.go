package connguard

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// conversation builds a pipelined request stream from pieces that sit
// near the edges of HTTP/1.1 framing: almost-valid lengths, chunk sizes
// that are off by one, odd whitespace and line endings, extra CR/LF
// between requests, request lines hiding in bodies. Streams like these
// reach the cases where a framing tracker and net/http could disagree far
// more often than random bytes do.
func conversation(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	maybe := func(p float64, s string) string {
		if rng.Float64() < p {
			return s
		}
		return ""
	}
	var b strings.Builder
	for range 1 + rng.IntN(4) {
		eol := pick("\r\n", "\r\n", "\r\n", "\n")
		b.WriteString(maybe(0.1, pick("\r\n", "\n", "\r\n\r\n", "\r")))
		b.WriteString(pick("GET", "POST", "POST", "OPTIONS", "PRI", "xGET") + " " +
			pick("/a", "/b?c=d", "*") + " " +
			pick("HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.2") + eol)
		b.WriteString(maybe(0.9, "Host: x"+eol))

		bodyLen := rng.IntN(6)
		chunked := rng.IntN(3) == 0
		for range rng.IntN(3) {
			switch rng.IntN(6) {
			case 0, 1:
				n := max(bodyLen+[]int{0, 0, 0, 1, -1}[rng.IntN(5)], 0)
				b.WriteString(pick("Content-Length", "content-length", "CONTENT-LENGTH") + ":" +
					pick(" ", "", "\t", "  ") + pick("", "0", "+") + strconv.Itoa(n) + pick("", " ", "\t") + eol)
			case 2:
				b.WriteString(pick("Transfer-Encoding", "transfer-encoding") + ":" +
					pick(" chunked", "chunked", " Chunked ", " gzip, chunked", " chunked, chunked", "", " chunked\r\n chunked") + eol)
				chunked = true
			case 3:
				b.WriteString("X-Fold: a" + eol + pick(" b", "\tb") + eol)
			case 4:
				b.WriteString(pick("Connection: keep-alive", "Connection: close", "Expect: 100-continue") + eol)
			default:
				b.WriteString("X-Other: " + pick("1", "GET /smuggled HTTP/1.1", "") + eol)
			}
		}
		b.WriteString(eol)

		if chunked {
			for range rng.IntN(3) {
				n := 1 + rng.IntN(5)
				b.WriteString(strconv.FormatInt(int64(n+rng.IntN(3)-1), 16) +
					maybe(0.2, pick(";ext", ";e=\"v\"", " ", " ;x")) + pick("\r\n", "\r\n", "\r\n", "\n") +
					strings.Repeat("z", n) + pick("\r\n", "\r\n", "\r\n", "\n", ""))
			}
			b.WriteString("0" + maybe(0.2, ";ext") + pick("\r\n", "\r\n", "\n"))
			b.WriteString(maybe(0.3, pick("X-T: 1\r\n", "X-T: 1\n", "GET /t HTTP/1.1\r\n", "Bad Name: 1\r\n", " fold\r\n")))
			b.WriteString(pick("\r\n", "\r\n", "\n", ""))
		} else {
			src := pick("zzzzz", "GET /in-body HTTP/1.1\r\n\r\n", "0\r\n\r\n", "\r\nzzz")
			b.WriteString(src[:min(bodyLen, len(src))])
		}
	}
	return b.String()
}

// TestTrackerAgreesWithNetHTTP runs FuzzTracker's checks over generated
// conversations with a fixed seed.
func TestTrackerAgreesWithNetHTTP(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(42, 1))
	for i := range n {
		s := conversation(rng)
		if p := streamProblem([]byte(s), uint64(i)); p != "" {
			t.Fatalf("%s\nstream %q", p, s)
		}
	}
}
