package connguard

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// region is a FileRegion over a shared descriptor that counts its Reads:
// a region sent with sendfile is never read.
type region struct {
	fd     int
	off, n int64
	reads  *atomic.Int32
}

func (r *region) FileRegion() (int, int64, int64) { return r.fd, r.off, r.n }
func (r *region) Advance(k int64)                 { r.off, r.n = r.off+k, r.n-k }

func (r *region) Read(p []byte) (int, error) {
	r.reads.Add(1)
	if r.n <= 0 {
		return 0, io.EOF
	}
	if r.fd < 0 {
		return 0, os.ErrClosed
	}
	k, err := syscall.Pread(r.fd, p[:min(int64(len(p)), r.n)], r.off)
	if k > 0 {
		r.Advance(int64(k))
	}
	if k == 0 && err == nil {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

// serveRegions serves GET /?off=&n= as a region of the file at path,
// all requests sharing one descriptor; fd -1 when off is negative.
func serveRegions(t *testing.T, path string, reads *atomic.Int32) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			off, _ := strconv.ParseInt(r.URL.Query().Get("off"), 10, 64)
			n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			reg := &region{fd: int(f.Fd()), off: off, n: n, reads: reads}
			if off < 0 {
				reg.fd, reg.off = -1, 0
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			// As the proxy serves a file: the header flushed first, or
			// net/http would copy 512 bytes through Read to sniff them.
			w.WriteHeader(http.StatusOK)
			BodyFollows(r.Context())
			w.(http.Flusher).Flush()
			_, _ = io.Copy(w, reg)
			Push(r.Context())
		})),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln)) }()
	t.Cleanup(func() { shutdown(t, srv, done) })
	return "http://" + ln.Addr().String()
}

// TestAFileRegionIsSentWithSendfileFromItsOffset: responses that share
// one descriptor, each from its own offset, arrive whole and exact, and
// nothing was read through user space. 3 MiB responses fill the socket
// buffer, so sendfile is resumed after waiting for the client.
func TestAFileRegionIsSentWithSendfileFromItsOffset(t *testing.T) {
	content := make([]byte, 8<<20)
	for i := range content {
		content[i] = byte(i * 7 / 3)
	}
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	url := serveRegions(t, path, &reads)
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	spans := []struct{ off, n int64 }{{0, 3 << 20}, {12345, 3 << 20}, {5 << 20, 3 << 20}, {100, 1}, {1 << 20, 70000}}
	var wg sync.WaitGroup
	errs := make(chan error, len(spans))
	for _, sp := range spans {
		wg.Go(func() {
			resp, err := client.Get(fmt.Sprintf("%s/?off=%d&n=%d", url, sp.off, sp.n))
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, content[sp.off:sp.off+sp.n]) {
				errs <- fmt.Errorf("span %d+%d: %d bytes (%v) that are not the span", sp.off, sp.n, len(got), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the regions were read %d times, want 0 (sendfile)", n)
	}

	// A region without a descriptor is copied with Read, as any reader.
	resp, err := client.Get(url + "/?off=-1&n=10")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if reads.Load() == 0 {
		t.Fatal("a region without a descriptor was not read")
	}
}

// TestAFileRegionPastTheFilesEndEndsTheConnection: a region longer than
// what is left of its file (a body truncated under the server) sends what
// there is and fails; the client sees a short body, never a complete one.
func TestAFileRegionPastTheFilesEndEndsTheConnection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	url := serveRegions(t, path, &reads)
	resp, err := http.Get(url + "/?off=500&n=2000")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(got) != 500 {
		t.Fatalf("read %d bytes, err %v; want the 500 there are and an unexpected EOF", len(got), err)
	}
}
