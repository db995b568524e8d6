package connguard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// getRequest1KiB is a browser-like GET padded to 1 KiB with a cookie.
func getRequest1KiB() string {
	head := "GET /static/app.js?v=1234 HTTP/1.1\r\n" +
		"Host: shop.example.com\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
		"Accept: */*\r\n" +
		"Accept-Language: en-US,en;q=0.5\r\n" +
		"Accept-Encoding: gzip, deflate, br\r\n" +
		"Referer: https://shop.example.com/\r\n" +
		"Connection: keep-alive\r\n" +
		"Cookie: session="
	tail := "\r\n\r\n"
	return head + strings.Repeat("c", 1024-len(head)-len(tail)) + tail
}

// BenchmarkTrackerGET feeds a stream of 1 KiB GET requests, one request
// per read as net/http's 4 KiB reader gets them, and consumes each result
// as Middleware would.
func BenchmarkTrackerGET(b *testing.B) {
	req := []byte(getRequest1KiB())
	line := requestLineHash("GET", "/static/app.js?v=1234", "HTTP/1.1")
	tr := newTracker()
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		tr.feed(req)
		if v := tr.take(1, line); v != allowed {
			b.Fatalf("verdict %v", v)
		}
	}
}

// BenchmarkTrackerCLBody feeds a POST with a 1 MiB Content-Length body in
// 32 KiB reads (the size io.Copy uses).
func BenchmarkTrackerCLBody(b *testing.B) {
	const bodyLen = 1 << 20
	head := []byte("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(bodyLen) + "\r\n\r\n")
	chunk := make([]byte, 32<<10)
	line := requestLineHash("POST", "/upload", "HTTP/1.1")
	tr := newTracker()
	b.SetBytes(int64(len(head) + bodyLen))
	b.ReportAllocs()
	for b.Loop() {
		tr.feed(head)
		for n := 0; n < bodyLen; n += len(chunk) {
			tr.feed(chunk)
		}
		if v := tr.take(1, line); v != allowed {
			b.Fatalf("verdict %v", v)
		}
	}
}

// BenchmarkServerGET puts the tracker's cost next to the whole request
// path: keep-alive GETs over loopback with and without the guard, and
// with the sidecar's send timeout (an arming per write, a timer update at
// most every 7.5 s).
func BenchmarkServerGET(b *testing.B) {
	req := getRequest1KiB()
	for _, mode := range []string{"plain", "guarded", "guarded+send"} {
		guarded := mode != "plain"
		var opts []Option
		if mode == "guarded+send" {
			opts = append(opts, SendTimeout(DefaultSendTimeout))
		}
		b.Run(mode, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "ok")
			}))
			srv := &http.Server{Handler: h}
			if guarded {
				srv.Handler, srv.ConnContext = Middleware(h), ConnContext
				ln = Listener(ln, opts...)
			}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			defer func() { srv.Close(); <-done }()

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			b.SetBytes(int64(len(req)))
			for b.Loop() {
				if _, err := io.WriteString(c, req); err != nil {
					b.Fatal(err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
		})
	}
}
