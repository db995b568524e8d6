package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/bodystore"
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
