package connguard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkServerFileRegion is a file-backed hit as the proxy sends it
// (header with MSG_MORE, then a 100 KiB FileRegion with sendfile) on a
// keep-alive loopback connection, without and with the send timeout
// (which re-arms per sendfile chunk of progress).
func BenchmarkServerFileRegion(b *testing.B) {
	const size = 100 << 10
	path := filepath.Join(b.TempDir(), "body")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var reads atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(http.StatusOK)
		BodyFollows(r.Context())
		w.(http.Flusher).Flush()
		_, _ = io.Copy(w, &region{fd: int(f.Fd()), n: size, reads: &reads})
		Push(r.Context())
	})
	for _, mode := range []string{"guarded", "guarded+send"} {
		var opts []Option
		if mode == "guarded+send" {
			opts = append(opts, SendTimeout(DefaultSendTimeout))
		}
		b.Run(mode, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: Middleware(h), ConnContext: ConnContext}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(Listener(ln, opts...)) }()
			defer func() { srv.Close(); <-done }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReaderSize(c, 64<<10)
			req := "GET /body HTTP/1.1\r\nHost: x\r\n\r\n"
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := io.WriteString(c, req); err != nil {
					b.Fatal(err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, res.Body); err != nil || n != size {
					b.Fatalf("%d bytes, %v", n, err)
				}
				res.Body.Close()
			}
		})
	}
	if reads.Load() != 0 {
		b.Fatalf("the region was read %d times", reads.Load())
	}
}

// BenchmarkArm is what the send timeout adds to a write: "throttled" is
// the usual case (one time.Now, the deadline younger than timeout/8 left
// as it is), "every" what each write would cost if it set the deadline
// (a runtime timer update), which arm's slack avoids.
func BenchmarkArm(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	c := &conn{Conn: nc, sendTimeout: DefaultSendTimeout, born: time.Now()}
	b.Run("throttled", func(b *testing.B) {
		for b.Loop() {
			c.arm()
		}
	})
	b.Run("every", func(b *testing.B) {
		for b.Loop() {
			c.rearm.Store(0)
			c.arm()
		}
	})
}
