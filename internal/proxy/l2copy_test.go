package proxy

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// Copies of bodies from L2 (l2bodies.go): what a replica does when its
// own body file is gone, and the bounds on what a copy may cost.

// smallBodyReplica is bodyReplica with a body store of maxBytes, and the
// tier config cfg (its L2 addresses are filled in).
func smallBodyReplica(t *testing.T, redisAddr string, o *origin, maxBytes int64, cfg tierconfig.Config) (*fixture, string) {
	t.Helper()
	dir := t.TempDir()
	bodies, _, err := bodystore.Open(t.Context(), bodystore.Options{Dir: dir, MaxBytes: maxBytes, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bodies.Close() })
	cfg.L2.Addresses, cfg.L2.Timeout = []string{redisAddr}, tierconfig.Duration(time.Second)
	compiled, err := tierconfig.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return replicaWith(t, redisAddr, o, func(po *Options) {
		po.Config, po.Bodies = tierconfig.NewHolder(compiled), bodies
	}), dir
}

// keyOf is the cache key f's proxy uses for GET http://host/path.
func keyOf(f *fixture, host, path string) string {
	req := httptest.NewRequest(http.MethodGet, "http://"+host+path, nil)
	kb := f.px.keys.Get().(*keyBuf)
	defer f.px.keys.Put(kb)
	kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
	return strings.Clone(kb.Key())
}

// tierL2 is a client of the replicas' tier in Redis, behind their backs.
func tierL2(t *testing.T, redisAddr string) *l2.Client {
	t.Helper()
	c, err := l2.New(l2.Config{Addrs: []string{redisAddr}, Prefix: "tc:test/cluster:", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rewriteBodyRef rewrites the body reference of the L2 entry under key,
// as a writer with the tier's Redis ACL could.
func rewriteBodyRef(t *testing.T, redisAddr, key string, edit func(*entry.BodyFile)) {
	t.Helper()
	c := tierL2(t, redisAddr)
	e, err := c.Get(t.Context(), key)
	if err != nil || e.File == nil {
		t.Fatalf("the L2 entry of %s: %+v, %v", key, e.File, err)
	}
	edit(e.File)
	if err := c.Set(t.Context(), key, &e, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// The replica that filled a body keeps in L1 an entry that does not count
// the chunks it wrote to L2 after storing it. When its body store evicts
// the file, that replica must copy the body back from L2 like any other
// replica, not go to the origin (and not delete the shared copy).
func TestAReplicaWhoseOwnBodyFileWasEvictedCopiesItBackFromL2(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 1 << 20
	o := newOrigin(t, bodies(size))
	a, adir := smallBodyReplica(t, srv.Addr(), o, 3<<20, tierconfig.Config{})
	want := bodyFor("/hot", size)

	expectBody(t, a.get("/hot", "Host", "shop"), 200, "MISS", want)
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 1 && e == 1 }, "/hot's chunk and entry in L2")
	hot := files(t, adir, ".body")
	if len(hot) != 1 {
		t.Fatalf("A's body files: %v, want one", hot)
	}
	for i := range 3 {
		a.get(fmt.Sprintf("/junk%d", i), "Host", "shop")
	}
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(adir, hot[0])); return os.IsNotExist(err) }, "A to evict /hot's file")

	before := o.count()
	expectBody(t, a.get("/hot", "Host", "shop"), 200, "HIT; layer=l1", want)
	if n := o.count(); n != before {
		t.Fatalf("A fetched /hot from the origin again (%d -> %d requests) although its body is in L2", before, n)
	}
	if !slices.Contains(files(t, adir, ".body"), hot[0]) {
		t.Fatalf("A's body files %v: /hot's (%s) was not copied back from L2", files(t, adir, ".body"), hot[0])
	}
	// L2 still holds /hot's entry and its chunk.
	e, err := tierL2(t, srv.Addr()).Get(t.Context(), keyOf(a, "shop", "/hot"))
	if err != nil || e.File == nil || hex.EncodeToString(e.File.ID[:])+".body" != hot[0] || e.File.Chunks != 1 {
		t.Fatalf("/hot's entry in L2: %+v, %v; want the one referring to %s in 1 chunk", e.File, err, hot[0])
	}
	if n, err := rc.Exists(t.Context(), "tc:test/cluster:b:"+strings.TrimSuffix(hot[0], ".body")+":0").Result(); n != 1 || err != nil {
		t.Fatalf("/hot's chunk in L2: %d, %v", n, err)
	}
	expectBody(t, a.get("/hot", "Host", "shop"), 200, "HIT; layer=l1", want)
}

// A reference in L2 within l2.maxBodySize whose chunks are not there
// (forged, or evicted by Redis) must not make a replica evict its own body
// files to make room for a copy that cannot succeed: the copy creates its
// file only when chunks arrive, and reserves as they do.
func TestACopyFromL2WhoseChunksAreMissingEvictsNoLocalBody(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 2 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, bdir := smallBodyReplica(t, srv.Addr(), o, 9<<20, tierconfig.Config{})

	for _, p := range []string{"/a", "/b", "/c"} {
		expectBody(t, b.get(p, "Host", "shop"), 200, "MISS", bodyFor(p, size))
	}
	waitFor(t, func() bool { return len(files(t, bdir, ".body")) == 3 }, "B's three body files")
	hot := files(t, bdir, ".body")
	expectBody(t, a.get("/evil", "Host", "shop"), 200, "MISS", bodyFor("/evil", size))
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 8 && e == 4 }, "the four bodies in L2")

	// 9 MiB: within l2.maxBodySize (16Mi), and B's whole budget. Its
	// first two chunks are there (the 2 MiB of the real body), the third
	// is not.
	rewriteBodyRef(t, srv.Addr(), keyOf(a, "shop", "/evil"), func(f *entry.BodyFile) {
		f.Size = 9<<20 - 64
		f.Chunks = l2.ChunksFor(f.Size)
	})

	before := o.count()
	expectBody(t, b.get("/evil", "Host", "shop"), 200, "MISS", bodyFor("/evil", size))
	if n := o.count(); n != before+1 {
		t.Fatalf("the origin saw %d more requests, want 1", n-before)
	}
	got := files(t, bdir, ".body")
	for _, name := range hot {
		if !slices.Contains(got, name) {
			t.Fatalf("B's body files after a failed copy: %v; %s (of %v) was evicted for a copy whose chunks were not in L2",
				got, name, hot)
		}
	}
}

// Each copy from L2 holds chunks in memory: at most maxBodyCopies run at
// once, and a request that finds every slot taken (for the tier's
// coalescing.timeout here, less than copySlotWait) fetches from the
// origin rather than adding one more.
func TestCopiesFromL2AreBoundedAndARequestFindingThemBusyFetchesFromTheOrigin(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 1 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, _ := smallBodyReplica(t, srv.Addr(), o, 1<<30, tierconfig.Config{
		Coalescing: tierconfig.Coalescing{Timeout: tierconfig.Duration(50 * time.Millisecond)},
	})
	for _, p := range []string{"/x", "/y"} {
		expectBody(t, a.get(p, "Host", "shop"), 200, "MISS", bodyFor(p, size))
	}
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 2 && e == 2 }, "both bodies in L2")

	// Four copies in progress on B.
	for range maxBodyCopies {
		b.px.copySlots <- struct{}{}
	}
	before := o.count()
	expectBody(t, b.get("/x", "Host", "shop"), 200, "MISS", bodyFor("/x", size))
	if n := o.count(); n != before+1 {
		t.Fatalf("with every copy slot taken, the origin saw %d more requests, want 1", n-before)
	}

	// Once a slot is free, B copies again.
	<-b.px.copySlots
	before = o.count()
	expectBody(t, b.get("/y", "Host", "shop"), 200, "HIT; layer=l2", bodyFor("/y", size))
	if n := o.count(); n != before {
		t.Fatalf("with a copy slot free, the origin saw %d more requests, want 0", n-before)
	}
	if n := len(b.px.copySlots); n != maxBodyCopies-1 {
		t.Fatalf("%d copy slots taken after the copy, want the %d the test holds", n, maxBodyCopies-1)
	}
}

// No replica of the tier writes a body above l2.maxBodySize to L2, so a
// reference claiming more is stale (the cap was lowered since) or forged:
// it is refused before anything is read or reserved, and the response is
// fetched from the origin.
func TestABodyReferenceAboveTheTiersL2MaxBodySizeIsNotCopied(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 2 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o) // l2.maxBodySize 16Mi
	b, bdir := smallBodyReplica(t, srv.Addr(), o, 1<<30, tierconfig.Config{L2: tierconfig.L2{MaxBodySize: 1 << 20}})

	expectBody(t, a.get("/big", "Host", "shop"), 200, "MISS", bodyFor("/big", size))
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 2 && e == 1 }, "/big's chunks and entry in L2")
	before := o.count()
	expectBody(t, b.get("/big", "Host", "shop"), 200, "MISS", bodyFor("/big", size))
	if n := o.count(); n != before+1 {
		t.Fatalf("the origin saw %d more requests, want 1", n-before)
	}
	// B's own fill keeps its body to itself (above B's cap), under an id
	// of its own.
	e, err := tierL2(t, srv.Addr()).Get(t.Context(), keyOf(a, "shop", "/big"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files(t, bdir, ".body") {
		if name == hex.EncodeToString(e.File.ID[:])+".body" {
			t.Fatalf("B copied the %d-byte body from L2 although its l2.maxBodySize is 1Mi", size)
		}
	}
}

// A chunk of the right length but the wrong bytes (damaged in Redis, or
// written by someone else) fails the body's CRC-32C: the copy is not
// kept, and the response comes from the origin.
func TestACopyFromL2WithADamagedChunkIsNotKept(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 2 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, bdir := bodyReplica(t, srv.Addr(), o)

	expectBody(t, a.get("/x", "Host", "shop"), 200, "MISS", bodyFor("/x", size))
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 2 && e == 1 }, "/x's chunks and entry in L2")
	e, err := tierL2(t, srv.Addr()).Get(t.Context(), keyOf(a, "shop", "/x"))
	if err != nil || e.File == nil {
		t.Fatalf("/x's entry in L2: %v", err)
	}
	id := hex.EncodeToString(e.File.ID[:])
	chunk := "tc:test/cluster:b:" + id + ":1"
	if err := rc.Set(t.Context(), chunk, strings.Repeat("z", 1<<20), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	before := o.count()
	expectBody(t, b.get("/x", "Host", "shop"), 200, "MISS", bodyFor("/x", size))
	if n := o.count(); n != before+1 {
		t.Fatalf("the origin saw %d more requests, want 1", n-before)
	}
	if slices.Contains(files(t, bdir, ".body"), id+".body") {
		t.Fatalf("B kept a copy of /x (%s) whose second chunk was damaged", id)
	}
	waitFor(t, func() bool { return len(files(t, bdir, ".tmp")) == 0 }, "B to keep no temporary file")
}
