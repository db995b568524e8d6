package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/test/testredis"
)

// Attacker-review tests of issue 12 (the body store). Each one FAILS on
// the code as reviewed: the failure is the weakness.

// dialSlowReader connects to addr with a tiny receive buffer and sends
// GET path without ever reading the answer: the slowest client there is.
func dialSlowReader(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	d := tinyWindowDialer()
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		t.Fatal(err)
	}
	return conn
}

// tinyWindowDialer dials with a 4 KiB receive buffer: a client whose
// kernel takes little at a time.
func tinyWindowDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// A slow-reading leader stalls no follower of its file fill.
//
// ATTACK (attacker review of issue 12): a client requests a large
// cacheable URL nobody has cached yet and then reads its response as
// slowly as TCP lets it (a tiny receive window, or simply not reading).
// fillFile wrote every chunk to that client (w.Write + Flush) inside the
// loop that reads the origin and appends to the body file, so the
// leader's socket paced the whole fill: the body file grew only as fast as
// the slowest client drained, every waiter that follows the growing file
// was stalled at the attacker's pace, the fill's budget reservation was
// pinned, and once the origin's body had been unread for
// origin.idleTimeout the watchdog cut it, which aborted the file: every
// follower's response was broken off and nothing stored, so the next
// request elected a new leader the attacker could stall again. One
// connection per hot large object denied it to all clients of the pod.
// (nginx's proxy_cache writes the upstream body to its temp file at
// upstream speed, independently of the client; proxy_cache_lock waiters
// read the finished file.)
// Defence: once a fill has begun its file, the copy origin -> file runs
// at the origin's pace on a goroutine of its own (fillfile.go), and the
// leader's client follows the file like any waiter (fillfeed.go).
func TestASlowReadingLeaderStallsNoFollowerOfAFileFill(t *testing.T) {
	const size = 48 << 20 // far above what the socket buffers of a loopback connection hold
	body := payload(21, size)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(body) // as fast as loopback goes
	})
	f := newFileFixture(t, "", o, bodystore.Options{})

	dialSlowReader(t, f.srv.Listener.Addr().String(), "/hot")
	waitFor(t, func() bool { _, tmp := f.files(); return len(tmp) == 1 }, "the slow client's fill to begin its body file")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	waiter := f.started(t, ctx, "/hot")
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
		t.Fatalf("the second client was not a waiter of the fill: X-Cache %q", x)
	}
	got, err := io.ReadAll(waiter.Body)
	if len(got) != size || !bytes.Equal(got, body) {
		t.Fatalf("an honest client waiting on the fill got %d of %d bytes in 10s (err %v) although the origin "+
			"sent the whole body at once: the attacker's unread connection paces the fill and every follower",
			len(got), size, err)
	}
}

// ATTACK: the replica that fills a body within l2.maxBodySize keeps in
// its L1 the entry with File.Chunks = 0 (ShareBody sets Chunks only on
// the copy it writes to L2). When that replica's body store later evicts
// the file (LRU under budget pressure, which any client causes cheaply by
// requesting a few distinct large URLs on that pod), the next request for
// the key on that replica finds the file gone and, since its own entry
// says Chunks 0, openBody deletes the key through the layered store:
// from L2 too, and delScript takes the body's chunks with it. So a purely
// local eviction on one replica deletes the tier's shared copy; every
// other replica without a local file then misses and goes to the origin.
// An attacker repeats it per hot object (evict on one pod, then ask that
// pod for the hot URL, with Cache-Control: no-store so it does not store
// it back) to defeat L2 sharing of large bodies and multiply origin load
// by the replica count. The same replica also never copies back from L2
// the body it shared.
// Defence (bodyLost, l2bodies.go): a local file that is gone never
// deletes anything from L2: the replica drops its own L1 entry only (and
// only while it still names that body), then finds L2's entry with its
// chunks and copies the body back like any other replica.
func TestALocalBodyFileEvictionOnOneReplicaLeavesTheSharedBodyToAllReplicas(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 1 << 20
	o := newOrigin(t, bodies(size))
	adir := t.TempDir()
	abodies, _, err := bodystore.Open(t.Context(), bodystore.Options{Dir: adir, MaxBytes: 3 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = abodies.Close() })
	a := replicaWith(t, srv.Addr(), o, func(po *Options) { po.Bodies = abodies })
	b, _ := bodyReplica(t, srv.Addr(), o)
	want := bodyFor("/hot", size)

	expectBody(t, a.get("/hot", "Host", "shop"), 200, "MISS", want)
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 1 && e == 1 }, "/hot's chunk and entry in L2")
	hot := files(t, adir, ".body")
	if len(hot) != 1 {
		t.Fatalf("replica A's body files: %v, want one", hot)
	}
	// The attacker asks A for a few other large URLs: A's body store
	// evicts /hot's file (its least recently used).
	for i := range 3 {
		a.get(fmt.Sprintf("/junk%d", i), "Host", "shop")
	}
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(adir, hot[0])); return os.IsNotExist(err) }, "A to evict /hot's file")
	// Then asks A for /hot, without letting A store it again.
	a.get("/hot", "Host", "shop", "Cache-Control", "no-store")

	// An honest client of replica B, which never had a problem.
	before := o.count()
	r := b.get("/hot", "Host", "shop")
	if r.xcache() != "HIT; layer=l2" || o.count() != before || r.body != string(want) {
		t.Fatalf("replica B: X-Cache %q, origin requests %d -> %d: a local eviction on replica A deleted /hot's "+
			"entry and chunks from L2, so B fetched it from the origin again", r.xcache(), before, o.count())
	}
}

// ATTACK: a writer with the tier's own Redis ACL (any compromised pod of
// the tier, or a bug) rewrites one entry's body reference to claim a huge
// size (here 1 GiB - 64 bytes, 1024 chunks: within every check GetBody
// makes) for a body whose chunks are not there. Every replica that is
// asked for that URL runs copyBody, whose CreateWithID reserves the whole
// claimed size up front, and the reservation evicts the replica's
// least-recently-used committed body files at once, before a single
// chunk is read; the first missing chunk then aborts the copy. One tiny
// Redis write, plus one request per pod, empties the local disk cache of
// every replica of the tier, and it can be repeated. Even without a
// hostile writer, a legitimate entry whose chunks Redis evicted
// (allkeys-lru) makes a replica evict local files for a copy that cannot
// succeed.
// Defence (openShared and copyBody, l2bodies.go): a reference larger
// than the tier's l2.maxBodySize is refused (no replica ever shares a
// larger body), and a copy creates its file only once chunks have
// arrived and reserves as they do, so that a copy whose chunks are not in
// L2 evicts nothing.
func TestAForgedBodySizeInL2EvictsNoLocalBodyFile(t *testing.T) {
	srv := testredis.Start(t)
	const size = 1 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, bdir := bodyReplica(t, srv.Addr(), o)
	rc := rawRedis(t, srv.Addr())

	// Replica B's hot bodies.
	for _, p := range []string{"/a", "/b", "/c"} {
		expectBody(t, b.get(p, "Host", "shop"), 200, "MISS", bodyFor(p, size))
	}
	waitFor(t, func() bool { return len(files(t, bdir, ".body")) == 3 }, "B's three body files")
	expectBody(t, a.get("/evil", "Host", "shop"), 200, "MISS", bodyFor("/evil", size))
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 4 && e == 4 }, "the four bodies in L2")

	// The hostile writer, through a client with the tier's prefix.
	req := httptest.NewRequest(http.MethodGet, "http://shop/evil", nil)
	kb := a.px.keys.Get().(*keyBuf)
	kb.build(req, a.px.cfg.Load().Match(req.URL.Path, req.Header))
	key := strings.Clone(kb.Key())
	a.px.keys.Put(kb)
	hostile, err := l2.New(l2.Config{Addrs: []string{srv.Addr()}, Prefix: "tc:test/cluster:", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostile.Close() })
	e, err := hostile.Get(t.Context(), key)
	if err != nil || e.File == nil {
		t.Fatalf("the /evil entry in L2: %+v, %v", e.File, err)
	}
	e.File.Size = 1<<30 - 64
	e.File.Chunks = l2.ChunksFor(e.File.Size)
	if err := hostile.Set(t.Context(), key, &e, time.Minute); err != nil {
		t.Fatal(err)
	}

	// One request to B for /evil.
	r := b.get("/evil", "Host", "shop")
	if r.status != http.StatusOK {
		t.Fatalf("GET /evil on B: %d", r.status)
	}
	if got := files(t, bdir, ".body"); len(got) < 3 {
		t.Fatalf("B's body files after one request for the forged entry: %v; its three hot bodies were evicted "+
			"for a copy of a 1 GiB body that was never in L2", got)
	}
}
