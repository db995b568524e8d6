package connguard

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestAHeaderHeldForItsBodyReachesTheClient serves, on one keep-alive
// connection, responses whose header the handler holds back for a body
// sent with sendfile (BodyFollows), and responses whose held header no
// body follows. The socket's unsent bytes (SIOCOUTQNSD) show the header
// held after the flush, and a header that no body follows sent by Push
// (without it the kernel would hold it until its 200 ms cork timer); the
// whole bodies arriving show sendfile pushing the header it carries.
func TestAHeaderHeldForItsBodyReachesTheClient(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	const off, n = 1000, 100_000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type held struct{ afterFlush, atEnd int }
	seen := make(chan held, 8)
	srv := &http.Server{
		Handler: Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var src io.Reader
			size := int64(0)
			if r.URL.Path == "/file" {
				f, err := os.Open(path)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				defer f.Close()
				if _, err := f.Seek(off, io.SeekStart); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				src, size = io.LimitReader(f, n), n
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			w.WriteHeader(http.StatusOK)
			BodyFollows(r.Context())
			w.(http.Flusher).Flush()
			var h held
			h.afterFlush = unsent(t, r)
			if src != nil {
				_, _ = io.Copy(w, src)
			}
			Push(r.Context())
			h.atEnd = unsent(t, r)
			seen <- h
		})),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln)) }()
	t.Cleanup(func() { shutdown(t, srv, done) })

	tr := &http.Transport{MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	for i, p := range []string{"/file", "/empty", "/file", "/empty", "/file"} {
		resp, err := client.Get("http://" + ln.Addr().String() + p)
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, p, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := body[off : off+n]
		if p == "/empty" {
			want = nil
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("request %d (%s): %d bytes (err %v), want %d", i, p, len(got), err, len(want))
		}
		// The handler sent h before returning, so before the client had
		// the whole response. A body may still wait for the client's
		// window at the end; a header alone must not.
		h := <-seen
		if h.afterFlush == 0 || (p == "/empty" && h.atEnd != 0) {
			t.Fatalf("request %d (%s): %d header bytes held after the flush (want some), %d unsent at the end",
				i, p, h.afterFlush, h.atEnd)
		}
	}
}

// unsent is the number of bytes in the send queue of r's connection that
// the kernel has not sent yet (SIOCOUTQNSD).
func unsent(t *testing.T, r *http.Request) int {
	const siocoutqnsd = 0x894b
	c := connFrom(r.Context())
	if c == nil {
		t.Error("no connection in the request's context")
		return -1
	}
	rc, err := c.Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Error(err)
		return -1
	}
	var v int32
	var errno syscall.Errno
	_ = rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, siocoutqnsd, uintptr(unsafe.Pointer(&v)))
	})
	if errno != 0 {
		t.Error(errno)
		return -1
	}
	return int(v)
}
