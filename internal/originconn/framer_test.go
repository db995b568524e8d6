package originconn

import (
	"strings"
	"testing"
)

// feedAll feeds stream to a fresh framer in pieces of at most size bytes
// (0: all at once), for a request that is HEAD or not, and returns where
// the exchange ended (-1: it did not) and the state it was left in.
func feedAll(stream string, head bool, size int) (end int, st fstate) {
	var f framer
	f.begin(head)
	if size <= 0 {
		size = len(stream)
	}
	pos := 0
	for pos < len(stream) {
		p := []byte(stream[pos:min(pos+size, len(stream))])
		n, done := f.feed(p)
		pos += n
		if done {
			return pos, f.st
		}
		if n < len(p) {
			return -2, f.st // consumed less without ending: a bug
		}
	}
	return -1, f.st
}

const past = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED"

func TestWhereTheFramerEndsAnExchange(t *testing.T) {
	cases := []struct {
		name     string
		response string // the exchange; the stream also carries past after it
		head     bool
		// ends: the exchange ends after response; otherwise the framer
		// ends in state (it passes bytes through).
		ends  bool
		state fstate
	}{
		{"a Content-Length body ends after its length",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"a zero Content-Length ends with the header",
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, true, 0},
		{"field names are matched in any case and values trimmed",
			"HTTP/1.1 200 OK\r\ncontent-LENGTH:\t 5 \r\n\r\nhello", false, true, 0},
		{"a Content-Length with leading zeros counts as its value",
			"HTTP/1.1 200 OK\r\nContent-Length: 005\r\n\r\nhello", false, true, 0},
		{"repeated equal Content-Lengths count once",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"bare LF line ends are read like CRLF in the header",
			"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello", false, true, 0},
		{"a status line without a reason phrase is read",
			"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"an HTTP/1.0 response with a length ends after it",
			"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"a HEAD response has no body whatever its Content-Length",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, true, 0},
		{"a HEAD response has no body whatever its Transfer-Encoding",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, true, 0},
		{"a 204 has no body",
			"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false, true, 0},
		{"a 304 has no body",
			"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nETag: \"a\"\r\n\r\n", false, true, 0},
		{"interim responses come before the final one",
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, true, 0},
		{"a chunked body ends after its last chunk and the empty trailer",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\n\r\n", false, true, 0},
		{"a chunked body ends after its trailer section",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5  \r\nhello\r\n0\r\nX-Sum: 1\r\nX-More: 2\r\n\r\n", false, true, 0},
		{"Transfer-Encoding chunked overrides Content-Length",
			"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, true, 0},
		{"HTTP/1.0 ignores Transfer-Encoding",
			"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n", false, true, 0},
		{"a body without length is read until the connection closes",
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello", false, false, fsUntilClose},
		{"101 Switching Protocols turns the connection into a tunnel",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi", false, false, fsTunnel},
		{"an unknown transfer coding is refused (the framer gives up)",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxxxx", false, false, fsLost},
		{"two transfer codings are refused",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", false, false, fsLost},
		{"differing Content-Lengths are refused",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", false, false, fsLost},
		{"a signed Content-Length is refused",
			"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", false, false, fsLost},
		{"a folded Content-Length is not followed",
			"HTTP/1.1 200 OK\r\nContent-Length:\r\n 5\r\n\r\nhello", false, false, fsLost},
		{"a folded other field is followed",
			"HTTP/1.1 200 OK\r\nX-Long: a\r\n b\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"a higher HTTP/1 minor version is read as 1.1",
			"HTTP/1.2 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"a version that is not HTTP/X.Y is refused",
			"HTTP/1.10 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, false, fsLost},
		{"a chunk-size line with a bare LF is refused",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", false, false, fsLost},
		{"chunk data not followed by CRLF is refused",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello!\r\n0\r\n\r\n", false, false, fsLost},
		{"a chunk size of 17 hex digits is refused",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n0\r\n\r\n", false, false, fsLost},
		{"a trailer with a bare LF is not followed",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n", false, false, fsLost},
		{"an empty status line is refused",
			"\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, false, fsLost},
		{"a three-digit status code is required",
			"HTTP/1.1 20 OK\r\nContent-Length: 5\r\n\r\nhello", false, false, fsLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stream := tc.response + past
			for _, size := range []int{0, 1, 2, 3, 7, 64} {
				end, st := feedAll(stream, tc.head, size)
				switch {
				case tc.ends && end != len(tc.response):
					t.Fatalf("in pieces of %d: the exchange ended at %d (state %d), want %d", size, end, st, len(tc.response))
				case tc.ends && st != fsIdle:
					t.Fatalf("in pieces of %d: ended in state %d, want idle", size, st)
				case !tc.ends && (end != -1 || st != tc.state):
					t.Fatalf("in pieces of %d: ended at %d in state %d, want no end and state %d", size, end, st, tc.state)
				}
			}
		})
	}
}

func TestTheFramerFollowsExchangesOneAfterAnother(t *testing.T) {
	var f framer
	for i, r := range []struct {
		head     bool
		response string
	}{
		{false, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		{true, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"},
		{false, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"},
		{false, "HTTP/1.1 304 Not Modified\r\n\r\n"},
		{false, "HTTP/1.1 200 OK\r\nContent-Length: " + "4096\r\n\r\n" + strings.Repeat("z", 4096)},
	} {
		f.begin(r.head)
		n, done := f.feed([]byte(r.response + "extra"))
		if !done || n != len(r.response) {
			t.Fatalf("exchange %d ended at %d (done %t), want %d", i+1, n, done, len(r.response))
		}
	}
}
