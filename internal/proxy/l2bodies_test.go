package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// bodyReplica is a replica (cluster_test.go) that keeps large bodies in a
// body store of its own, in dir.
func bodyReplica(t *testing.T, redisAddr string, o *origin) (f *fixture, dir string) {
	t.Helper()
	dir = t.TempDir()
	bodies, _, err := bodystore.Open(t.Context(), bodystore.Options{Dir: dir, MaxBytes: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bodies.Close() }) // after the proxy's own cleanup
	return replicaWith(t, redisAddr, o, func(po *Options) { po.Bodies = bodies }), dir
}

// files lists the names in dir ending in suffix.
func files(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// chunksAndEntries counts the body chunks and the entries of the replicas'
// tier in Redis.
func chunksAndEntries(t *testing.T, rc *redis.Client) (chunks, entries int) {
	t.Helper()
	ctx := context.Background()
	b, err := rc.Keys(ctx, "tc:test/cluster:b:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	e, err := rc.Keys(ctx, "tc:test/cluster:e:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(b), len(e)
}

func TestAReplicaServesALargeBodyAnotherFilledFromL2WithoutTheOrigin(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 4 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, bdir := bodyReplica(t, srv.Addr(), o)
	want := bodyFor("/big", size)

	expectBody(t, a.get("/big", "Host", "shop"), 200, "MISS", want)
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 4 && e == 1 }, "the body's 4 chunks and its entry in L2")
	expectBody(t, b.get("/big", "Host", "shop"), 200, "HIT; layer=l2", want)
	// B copied the body into a file of its own, which serves it now.
	if got := files(t, bdir, ".body"); len(got) != 1 {
		t.Fatalf("replica B holds body files %v, want one", got)
	}
	expectBody(t, b.get("/big", "Host", "shop"), 200, "HIT; layer=l1", want)
	if n := o.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1", n)
	}
}

func TestAReplicaThatCannotCopyABodyFromL2FetchesItFromTheOrigin(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 3 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, bdir := bodyReplica(t, srv.Addr(), o)
	want := bodyFor("/gap", size)

	expectBody(t, a.get("/gap", "Host", "shop"), 200, "MISS", want)
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 3 && e == 1 }, "the body's chunks and its entry in L2")
	names, err := rc.Keys(context.Background(), "tc:test/cluster:b:*:1").Result()
	if err != nil || len(names) != 1 {
		t.Fatalf("chunk 1: %v, %v", names, err)
	}
	if err := rc.Del(context.Background(), names[0]).Err(); err != nil {
		t.Fatal(err)
	}
	// The copy fails: a miss, served whole from the origin, and no
	// partial file is kept.
	expectBody(t, b.get("/gap", "Host", "shop"), 200, "MISS", want)
	if n := o.count(); n != 2 {
		t.Fatalf("the origin saw %d requests, want 2", n)
	}
	// (B's own fill commits its file just after the response.)
	waitFor(t, func() bool { return len(files(t, bdir, ".tmp")) == 0 }, "replica B to keep no temporary file")
	expectBody(t, b.get("/gap", "Host", "shop"), 200, "HIT; layer=l1", want)
}

func TestConcurrentMissesOnTwoReplicasForALargeBodyMakeOneOriginRequest(t *testing.T) {
	srv := testredis.Start(t)
	const size = 4 << 20
	h := newHeldOrigin(t, size, false)
	a, adir := bodyReplica(t, srv.Addr(), h.origin)
	b, _ := bodyReplica(t, srv.Addr(), h.origin)

	var wg sync.WaitGroup
	got := make([]response, 4)
	wg.Add(1)
	go func() { defer wg.Done(); got[0] = a.get("/big", "Host", "shop") }()
	h.holding(t)
	// A's fill has begun its file: a body it could keep to itself
	// would give up the tier-wide lease now.
	waitFor(t, func() bool { return len(files(t, adir, ".tmp")) == 1 }, "A's fill to begin its body file")
	for i := 1; i < len(got); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = b.get("/big", "Host", "shop") }()
	}
	// B's requests wait for A's fill; give one that wrongly fetches the
	// chance to show before A's fill goes on.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) && h.origin.count() == 1 {
		time.Sleep(5 * time.Millisecond)
	}
	close(h.release)
	wg.Wait()
	for i, r := range got {
		if r.status != http.StatusOK || r.body != string(h.body) {
			t.Fatalf("response %d: %d %q with %d bytes, want 200 with the %d bytes", i, r.status, r.xcache(), len(r.body), len(h.body))
		}
	}
	if n := h.origin.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1 for both replicas", n)
	}
}

// withL2MaxBody is a replicaWith hook that sets the tier's l2.maxBodySize.
func withL2MaxBody(t *testing.T, redisAddr string, size tierconfig.Size, bodies *bodystore.Store) func(*Options) {
	return func(po *Options) {
		compiled, err := tierconfig.Compile(tierconfig.Config{L2: tierconfig.L2{
			Addresses: []string{redisAddr}, Timeout: tierconfig.Duration(time.Second), MaxBodySize: size,
		}})
		if err != nil {
			t.Fatal(err)
		}
		po.Config, po.Bodies = tierconfig.NewHolder(compiled), bodies
	}
}

// rawRedis inspects Redis behind the replicas' backs.
func rawRedis(t *testing.T, addr string) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
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
	kb.build(req, a.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
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
