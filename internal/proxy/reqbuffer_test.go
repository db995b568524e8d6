package proxy

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/metrics"
)

// gatedBody sends pieces of body, each only after the previous one was
// read, and closes done just before it reports its end: an origin that
// sees done open was contacted before the client had sent all.
type gatedBody struct {
	pieces []string
	gap    time.Duration
	done   chan struct{}
	i      int
}

func newGatedBody(n int, piece string, gap time.Duration) *gatedBody {
	return &gatedBody{pieces: slicesRepeat(piece, n), gap: gap, done: make(chan struct{})}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func (g *gatedBody) Read(p []byte) (int, error) {
	if g.i == len(g.pieces) {
		return 0, io.EOF
	}
	if g.i > 0 {
		time.Sleep(g.gap) // a slow client's pace, not a barrier
	}
	n := copy(p, g.pieces[g.i])
	g.i++
	if g.i == len(g.pieces) {
		close(g.done)
	}
	return n, nil
}

// bodyEcho is an origin that answers with what it was sent: whether the
// client's body had all been sent when the origin was called (gate), the
// length and hash of the body, and its framing.
func bodyEcho(gate *chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		whole := "unknown"
		if gate != nil && *gate != nil {
			select {
			case <-*gate:
				whole = "whole"
			default:
				whole = "partial"
			}
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %d %x cl=%d te=%v", whole, len(b), sha256.Sum256(b), r.ContentLength, r.TransferEncoding)
	}
}

// A slow client's body reaches the origin whole and at once: the origin
// is called only once the client has sent its last byte (so the upload
// holds no application worker), with Content-Length, also when the body
// came chunked. With origin.streamRequestBodies, or a body announced
// larger than origin.requestBuffer, it is forwarded as it arrives.
func TestASlowUploadReachesTheOriginOnlyOnceWhole(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     string
		chunked bool
		want    string // whole or partial
		result  string // requests_bodies_buffered_total's
	}{
		{"with Content-Length", "", false, "whole", metrics.BufferedWhole},
		{"chunked", "", true, "whole", metrics.BufferedWhole},
		{"announced larger than the buffer", "origin: {requestBuffer: 1Ki}", false, "partial", metrics.BufferedTooLarge},
		{"chunked and larger than the buffer", "origin: {requestBuffer: 1Ki}", true, "partial", metrics.BufferedTooLarge},
		{"with streamRequestBodies", "origin: {streamRequestBodies: true}", false, "partial", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var gate chan struct{}
			f := newFixture(t, c.cfg, bodyEcho(&gate))
			obs := observe(t, f.px)
			g := newGatedBody(8, strings.Repeat("p", 512), 20*time.Millisecond)
			gate = g.done
			req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/upload", g)
			req.ContentLength = 8 * 512
			if c.chunked {
				req.ContentLength = -1
			}
			r := f.send(req)
			body := strings.Repeat("p", 8*512)
			sum := sha256.Sum256([]byte(body))
			if r.status != 200 || !strings.HasPrefix(r.body, fmt.Sprintf("%s %d %x ", c.want, len(body), sum)) {
				t.Fatalf("got %d %q, want the origin called %s with the %d bytes", r.status, r.body, c.want, len(body))
			}
			if c.want == "whole" && !strings.HasSuffix(r.body, fmt.Sprintf("cl=%d te=[]", len(body))) {
				t.Errorf("a buffered body reached the origin as %q, want with Content-Length", r.body)
			}
			if c.result != "" {
				if n := testCounter(obs.m.RequestBodies.WithLabelValues(c.result)); n != 1 {
					t.Errorf("request_bodies_buffered_total{result=%q} = %v, want 1", c.result, n)
				}
			}
		})
	}
}

// Every size around the chunk and buffer bounds reaches the origin as it
// was sent, with Content-Length or chunked.
func TestABufferedBodyReachesTheOriginByteForByte(t *testing.T) {
	const limit = 200 << 10
	f := newFixture(t, "origin: {requestBuffer: 200Ki}", bodyEcho(nil))
	for _, n := range []int{1, reqChunk - 1, reqChunk, reqChunk + 1, 3*reqChunk + 5, limit - 1, limit, limit + 1, 2*limit + 7} {
		for _, chunked := range []bool{false, true} {
			body := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstu!"), n/32+1)[:n]
			req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "PUT", f.srv.URL+"/b", io.NopCloser(bytes.NewReader(body)))
			req.ContentLength = int64(n)
			if chunked {
				req.ContentLength = -1
			}
			r := f.send(req)
			want := fmt.Sprintf("unknown %d %x ", n, sha256.Sum256(body))
			if r.status != 200 || !strings.HasPrefix(r.body, want) {
				t.Fatalf("%d bytes, chunked %v: got %d %q, want %q...", n, chunked, r.status, r.body, want)
			}
		}
	}
	if left := f.px.reqBudget.left.Load(); left != RequestBufferBudget {
		t.Fatalf("%d bytes of the buffer budget left after every body was sent, want %d: buffers leaked", left, RequestBufferBudget)
	}
}

// Once the sidecar-wide budget is spent, bodies are forwarded as they
// arrive, whole and counted, rather than refused; the budget comes back
// however a request ends (a stalled upload's 408, a client that leaves,
// a malformed body), and such a request never reaches the origin.
func TestTheRequestBufferBudgetBoundsMemoryAndComesBack(t *testing.T) {
	var calls atomic.Int32
	echo := bodyEcho(nil)
	f := newFixture(t, "origin: {idleTimeout: 200ms}", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		echo(w, r)
	})
	obs := observe(t, f.px)
	f.px.reqBudget = newByteBudget(8 << 10)

	body := strings.Repeat("b", 20<<10)
	req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/over", strings.NewReader(body))
	r := f.send(req)
	if r.status != 200 || !strings.HasPrefix(r.body, fmt.Sprintf("unknown %d ", len(body))) {
		t.Fatalf("over the budget: got %d %q, want the whole body forwarded", r.status, r.body)
	}
	if n := testCounter(obs.m.RequestBodies.WithLabelValues(metrics.BufferedOverBudget)); n != 1 {
		t.Errorf("request_bodies_buffered_total{result=over_budget} = %v, want 1", n)
	}
	calls.Store(0)
	const budget = 4 * reqChunk
	f.px.reqBudget = newByteBudget(budget)
	addr := f.srv.Listener.Addr().String()
	for name, raw := range map[string]string{
		"a stalled upload":     "PUT /s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
		"a malformed body":     "POST /m HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"a client that leaves": "PUT /l HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
	} {
		res, _ := rawExchange(t, addr, raw, name == "a client that leaves")
		if res.StatusCode != http.StatusRequestTimeout && res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: got %d, want 408 or 400", name, res.StatusCode)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d of the requests whose bodies never arrived whole reached the origin", n)
	}
	waitFor(t, func() bool { return f.px.reqBudget.left.Load() == budget }, "the buffer budget to come back whole")
}

// A request body the client announces but does not send reserves
// nothing it has not received: the budget is taken as bytes arrive.
func TestAnAnnouncedBodyReservesOnlyWhatArrived(t *testing.T) {
	f := newFixture(t, "origin: {idleTimeout: 5s}", bodyEcho(nil))
	c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(1<<20)+"\r\n\r\n0123456789")
	waitFor(t, func() bool { return f.px.reqBudget.left.Load() < RequestBufferBudget }, "the body to be read")
	if held := RequestBufferBudget - f.px.reqBudget.left.Load(); held > reqChunk {
		t.Fatalf("10 bytes of an announced 1 MiB hold %d bytes of the budget, want at most %d", held, reqChunk)
	}
}
