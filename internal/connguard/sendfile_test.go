package connguard

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// readFromRecorder wraps an accepted connection and records the dynamic
// type of every source handed to its ReadFrom before delegating to the
// wrapped connection's (for a *net.TCPConn: sendfile or splice).
type readFromRecorder struct {
	net.Conn
	mu   sync.Mutex
	seen []string
}

func (c *readFromRecorder) ReadFrom(r io.Reader) (int64, error) {
	c.mu.Lock()
	c.seen = append(c.seen, sourceType(r))
	c.mu.Unlock()
	return c.Conn.(io.ReaderFrom).ReadFrom(r)
}

func (c *readFromRecorder) sources() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// sourceType names r's type, looking through an *io.LimitedReader.
func sourceType(r io.Reader) string {
	if lr, ok := r.(*io.LimitedReader); ok {
		return fmt.Sprintf("%T(%T)", lr, lr.R)
	}
	return fmt.Sprintf("%T", r)
}

type recordingListener struct {
	net.Listener
	conns chan *readFromRecorder
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &readFromRecorder{Conn: c}
	select {
	case l.conns <- rc:
	default:
	}
	return rc, nil
}

// TestFileBodyReachesTheConnectionsReadFrom proves that a handler's
// io.Copy from a file into its ResponseWriter reaches the TCP connection's
// ReadFrom (sendfile) through the guard's connection wrapper: net/http
// only takes that path when the connection it holds is an io.ReaderFrom.
func TestFileBodyReachesTheConnectionsReadFrom(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	const off, n = 1000, 100_000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: ln, conns: make(chan *readFromRecorder, 4)}
	srv := &http.Server{
		Handler: Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, err := os.Open(path)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer f.Close()
			src := io.Reader(f)
			size := int64(len(body))
			if r.URL.Path == "/section" {
				if _, err := f.Seek(off, io.SeekStart); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				src, size = io.LimitReader(f, n), n
			}
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			_, _ = io.Copy(w, src)
		})),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(rl)) }()
	t.Cleanup(func() { shutdown(t, srv, done) })

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		path string
		want []string // os.File.WriteTo hands itself on as os.fileWithoutWriteTo, still a file to sendfile
		body []byte
	}{
		{"/whole", []string{"*os.File", "os.fileWithoutWriteTo"}, body},
		{"/section", []string{"*io.LimitedReader(*os.File)"}, body[off : off+n]},
	} {
		resp, err := client.Get("http://" + ln.Addr().String() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, tc.body) {
			t.Fatalf("%s: %d bytes (err %v), want the file's %d", tc.path, len(got), err, len(tc.body))
		}
		var rc *readFromRecorder
		select {
		case rc = <-rl.conns:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no connection recorded", tc.path)
		}
		if src := rc.sources(); len(src) != 1 || !slices.Contains(tc.want, src[0]) {
			t.Fatalf("%s: the connection's ReadFrom saw %q, want one of %q", tc.path, src, tc.want)
		}
	}
}
