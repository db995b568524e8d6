package l2

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// TestL2Bodies runs the chunked body behaviours against a standalone
// server and a three-master cluster (chunks of one body land in several
// slots there).
func TestL2Bodies(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"bodies of 1, 1.5 and 16 MiB round-trip in chunks", testBodyRoundTrip},
		{"a missing or short chunk fails the read", testBodyMissingChunk},
		{"chunks get the TTL with a margin and ExtendBody renews it", testBodyTTL},
		{"deleting a file-backed entry deletes its chunks", testBodyDeleteByKey},
		{"a tag purge deletes the chunks of file-backed entries", testBodyPurgeTags},
		{"a prefix purge deletes the chunks of file-backed entries", testBodyPurgeMatching},
		{"a file-backed entry replacing another deletes the old chunks but not its own", testBodyReplace},
		{"set refuses a file-backed entry whose body is not in L2", testBodySetRefuses},
		{"a source that ends early fails SetBody", testBodyShortSource},
	}
	for _, e := range []*env{standaloneEnv(t), clusterEnv(t)} {
		t.Run(e.mode, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, e)
				})
			}
		})
	}
}

// body is size deterministic pseudo-random bytes.
func body(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, size)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newID(seed uint64) [16]byte {
	var id [16]byte
	copy(id[:], body(16, seed))
	return id
}

// putBody stores b as body id and returns its reference.
func putBody(t *testing.T, c *Client, id [16]byte, b []byte, ttl time.Duration) entry.BodyFile {
	t.Helper()
	n, err := c.SetBody(ctxT(t), id, bytes.NewReader(b), int64(len(b)), ttl)
	if err != nil {
		t.Fatalf("SetBody(%d bytes): %v", len(b), err)
	}
	if n != ChunksFor(int64(len(b))) {
		t.Fatalf("SetBody wrote %d chunks, want %d", n, ChunksFor(int64(len(b))))
	}
	return entry.BodyFile{ID: id, Size: int64(len(b)), CRC: crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)), Chunks: n}
}

// fileEntry is testEntry with its body in a file (and L2).
func fileEntry(target string, ref entry.BodyFile, tags ...string) *entry.Entry {
	e := testEntry(target, tags...)
	e.Body = nil
	e.File = &ref
	return e
}

// chunksLeft counts the chunks of body id that exist.
func chunksLeft(t *testing.T, e *env, c *Client, id [16]byte, chunks uint32) int {
	t.Helper()
	n := 0
	for i := range chunks {
		x, err := e.raw.Exists(ctxT(t), c.k.chunkKey(id, i)).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += int(x)
	}
	return n
}

func testBodyRoundTrip(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	for i, size := range []int{1 << 20, 3 << 19, 16 << 20, 1, ChunkSize + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			b := body(size, uint64(i))
			ref := putBody(t, c, newID(uint64(100+i)), b, time.Minute)
			var got bytes.Buffer
			if err := c.GetBody(ctxT(t), ref.ID, ref.Size, ref.Chunks, &got); err != nil {
				t.Fatalf("GetBody: %v", err)
			}
			if !bytes.Equal(got.Bytes(), b) {
				t.Fatalf("GetBody returned %d bytes that differ from the %d stored", got.Len(), len(b))
			}
			// Every chunk is full but the last.
			for j := range ref.Chunks {
				n, err := e.raw.StrLen(ctxT(t), c.k.chunkKey(ref.ID, j)).Result()
				if err != nil || n != chunkLen(ref.Size, j) {
					t.Fatalf("chunk %d: %d bytes, %v; want %d", j, n, err, chunkLen(ref.Size, j))
				}
			}
		})
	}
}

func testBodyMissingChunk(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	b := body(5<<20+17, 1)
	ref := putBody(t, c, newID(1), b, time.Minute)

	// A short chunk (the wrong length) is a miss.
	if err := e.raw.Set(ctx, c.k.chunkKey(ref.ID, 4), "short", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.GetBody(ctx, ref.ID, ref.Size, ref.Chunks, &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetBody with a short last chunk = %v, want ErrNotFound", err)
	}

	// A missing middle chunk: the read stops there with ErrNotFound, and
	// never passes the chunks after it on.
	putBody(t, c, ref.ID, b, time.Minute)
	if err := e.raw.Del(ctx, c.k.chunkKey(ref.ID, 2)).Err(); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	err := c.GetBody(ctx, ref.ID, ref.Size, ref.Chunks, &got)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetBody with chunk 2 missing = %v, want ErrNotFound", err)
	}
	if got.Len() > 2*ChunkSize || !bytes.Equal(got.Bytes(), b[:got.Len()]) {
		t.Fatalf("GetBody wrote %d bytes before failing; want at most the 2 chunks before the gap, unchanged", got.Len())
	}

	// A reference that does not fit the size is refused before any I/O.
	if err := c.GetBody(ctx, ref.ID, ref.Size, ref.Chunks+1, &got); !errors.Is(err, ErrBodySize) {
		t.Fatalf("GetBody with a wrong chunk count = %v, want ErrBodySize", err)
	}
}

func testBodyTTL(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	ref := putBody(t, c, newID(2), body(2<<20+5, 2), 20*time.Second)
	for i := range ref.Chunks {
		d := e.raw.PTTL(ctx, c.k.chunkKey(ref.ID, i)).Val()
		if want := 20*time.Second + chunkTTLMargin; d > want || d < want-5*time.Second {
			t.Fatalf("chunk %d: PTTL %s, want just under %s", i, d, want)
		}
	}
	ok, err := c.ExtendBody(ctx, ref.ID, ref.Size, time.Hour)
	if err != nil || !ok {
		t.Fatalf("ExtendBody = %v, %v; want true (every chunk is there)", ok, err)
	}
	for i := range ref.Chunks {
		if d := e.raw.PTTL(ctx, c.k.chunkKey(ref.ID, i)).Val(); d < time.Hour {
			t.Fatalf("chunk %d: PTTL %s after ExtendBody(1h)", i, d)
		}
	}
	if err := e.raw.Del(ctx, c.k.chunkKey(ref.ID, 1)).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.ExtendBody(ctx, ref.ID, ref.Size, time.Hour); err != nil || ok {
		t.Fatalf("ExtendBody with chunk 1 gone = %v, %v; want false", ok, err)
	}
}

func testBodyDeleteByKey(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	ref := putBody(t, c, newID(3), body(3<<20, 3), time.Minute)
	mustSet(t, c, "big", fileEntry("/big", ref), time.Minute)
	// An inline entry whose body happens to hold the version 2 magic
	// travels back from the script, and is still only counted.
	small := testEntry("/small")
	small.Body = []byte("TCE\x02 is in this body")
	mustSet(t, c, "small", small, time.Minute)

	n, err := c.DeleteCount(ctx, "big", "small", "never stored")
	if err != nil || n != 2 {
		t.Fatalf("DeleteCount = %d, %v; want 2", n, err)
	}
	if left := chunksLeft(t, e, c, ref.ID, ref.Chunks); left != 0 {
		t.Fatalf("%d of %d chunks left after the entry was deleted", left, ref.Chunks)
	}
}

func testBodyPurgeTags(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	red := putBody(t, c, newID(4), body(2<<20+1, 4), time.Minute)
	blue := putBody(t, c, newID(5), body(1<<20, 5), time.Minute)
	mustSet(t, c, "red", fileEntry("/red", red, "red"), time.Minute)
	mustSet(t, c, "blue", fileEntry("/blue", blue, "blue"), time.Minute)
	mustSet(t, c, "inline", testEntry("/inline", "red"), time.Minute)

	n, err := c.PurgeTags(ctx, []string{"red"})
	if err != nil || n != 2 {
		t.Fatalf("PurgeTags = %d, %v; want 2", n, err)
	}
	if left := chunksLeft(t, e, c, red.ID, red.Chunks); left != 0 {
		t.Fatalf("%d of %d chunks of the purged body left", left, red.Chunks)
	}
	if left := chunksLeft(t, e, c, blue.ID, blue.Chunks); left != int(blue.Chunks) {
		t.Fatalf("%d of %d chunks of the untouched body left", left, blue.Chunks)
	}
}

func testBodyPurgeMatching(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	var doomed, kept []entry.BodyFile
	for i := range 6 {
		ref := putBody(t, c, newID(uint64(10+i)), body(1<<20+i, uint64(10+i)), time.Minute)
		dir := "/keep/"
		if i%2 == 0 {
			dir = "/drop/"
			doomed = append(doomed, ref)
		} else {
			kept = append(kept, ref)
		}
		mustSet(t, c, fmt.Sprint("k", i), fileEntry(fmt.Sprint(dir, i), ref), time.Minute)
	}
	n, err := c.PurgeMatching(ctx, func(_ string, e *entry.Entry) bool { return strings.HasPrefix(e.Target, "/drop/") })
	if err != nil || n != len(doomed) {
		t.Fatalf("PurgeMatching = %d, %v; want %d", n, err, len(doomed))
	}
	for _, ref := range doomed {
		if left := chunksLeft(t, e, c, ref.ID, ref.Chunks); left != 0 {
			t.Errorf("body %x: %d chunks left after its entry was purged", ref.ID, left)
		}
	}
	for _, ref := range kept {
		if left := chunksLeft(t, e, c, ref.ID, ref.Chunks); left != int(ref.Chunks) {
			t.Errorf("body %x: %d of %d chunks left, but its entry was not purged", ref.ID, left, ref.Chunks)
		}
	}
}

func testBodyReplace(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	old := putBody(t, c, newID(20), body(2<<20, 20), time.Minute)
	mustSet(t, c, "k", fileEntry("/k", old), time.Minute)
	// The same body, refreshed (a 304 gives it new times): its chunks
	// stay.
	refreshed := fileEntry("/k", old)
	refreshed.ResponseTime = refreshed.ResponseTime.Add(time.Minute)
	mustSet(t, c, "k", refreshed, 2*time.Minute)
	if left := chunksLeft(t, e, c, old.ID, old.Chunks); left != int(old.Chunks) {
		t.Fatalf("refreshing an entry with the same body left %d of %d chunks", left, old.Chunks)
	}
	cur := putBody(t, c, newID(21), body(1<<20+3, 21), time.Minute)
	mustSet(t, c, "k", fileEntry("/k", cur), time.Minute)
	if left := chunksLeft(t, e, c, old.ID, old.Chunks); left != 0 {
		t.Fatalf("%d chunks of the replaced body left", left)
	}
	got, err := c.Get(ctx, "k")
	if err != nil || got.File == nil || *got.File != cur {
		t.Fatalf("Get = %+v, %v; want the new body's reference", got.File, err)
	}
	var buf bytes.Buffer
	if err := c.GetBody(ctx, cur.ID, cur.Size, cur.Chunks, &buf); err != nil {
		t.Fatalf("GetBody of the new body: %v", err)
	}
}

func testBodySetRefuses(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	local := fileEntry("/local", entry.BodyFile{ID: newID(30), Size: 5 << 20})
	if err := c.Set(ctx, "local", local, time.Minute); err == nil || !strings.Contains(err.Error(), "Chunks") {
		t.Fatalf("Set of an entry whose body is local = %v, want an error naming Chunks", err)
	}
	lying := fileEntry("/lying", entry.BodyFile{ID: newID(31), Size: 5 << 20, Chunks: 2})
	if err := c.Set(ctx, "lying", lying, time.Minute); !errors.Is(err, ErrBodySize) {
		t.Fatalf("Set of an entry whose chunk count does not fit its size = %v, want ErrBodySize", err)
	}
	for _, k := range []string{"local", "lying"} {
		if _, err := c.Get(ctx, k); err != ErrNotFound {
			t.Errorf("Get(%s) = %v after a refused Set", k, err)
		}
	}
	if _, err := c.SetBody(ctx, newID(32), bytes.NewReader(nil), 0, time.Minute); !errors.Is(err, ErrBodySize) {
		t.Errorf("SetBody of an empty body = %v, want ErrBodySize", err)
	}
	if _, err := c.SetBody(ctx, newID(32), bytes.NewReader([]byte("x")), 1, 0); err == nil {
		t.Error("SetBody with a zero TTL succeeded")
	}
}

func testBodyShortSource(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	b := body(2<<20, 40)
	// The source holds 1.5 MiB of a body said to have 2.
	if _, err := c.SetBody(ctxT(t), newID(40), bytes.NewReader(b[:3<<19]), int64(len(b)), time.Minute); err == nil {
		t.Fatal("SetBody from a source shorter than the size succeeded")
	}
}

// TestBodyACL: a tier's ACL user, made from the line in docs/l2.md,
// writes, reads, extends, replaces and deletes bodies and purges them by
// key, tag and prefix, with nothing in the ACL LOG.
func TestBodyACL(t *testing.T) {
	srv := testredis.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := ctxT(t)
	const pfx = "tc:shop/web:"
	if err := admin.Do(ctx, docsACL(t, "tc-shop-web", "pw")...).Err(); err != nil {
		t.Fatalf("ACL SETUSER from docs/l2.md: %v", err)
	}
	c := newTestClient(t, Config{Addrs: []string{srv.Addr()}, Prefix: pfx, Username: "tc-shop-web", Password: "pw", Timeout: testTimeout})
	e := &env{mode: ModeStandalone, addrs: []string{srv.Addr()}, raw: admin}

	a := putBody(t, c, newID(50), body(2<<20+9, 50), time.Minute)
	if ok, err := c.ExtendBody(ctx, a.ID, a.Size, time.Hour); err != nil || !ok {
		t.Fatalf("ExtendBody = %v, %v", ok, err)
	}
	mustSet(t, c, "a", fileEntry("/a", a, "t"), time.Minute)
	b := putBody(t, c, newID(51), body(1<<20, 51), time.Minute)
	mustSet(t, c, "a", fileEntry("/a", b, "t"), time.Minute) // replaces a
	var buf bytes.Buffer
	if err := c.GetBody(ctx, b.ID, b.Size, b.Chunks, &buf); err != nil {
		t.Fatalf("GetBody: %v", err)
	}
	if n, err := c.PurgeTags(ctx, []string{"t"}); err != nil || n != 1 {
		t.Fatalf("PurgeTags = %d, %v", n, err)
	}
	d := putBody(t, c, newID(52), body(1<<20, 52), time.Minute)
	mustSet(t, c, "d", fileEntry("/d", d), time.Minute)
	if n, err := c.PurgeMatching(ctx, func(string, *entry.Entry) bool { return true }); err != nil || n != 1 {
		t.Fatalf("PurgeMatching = %d, %v", n, err)
	}
	f := putBody(t, c, newID(53), body(1<<20, 53), time.Minute)
	mustSet(t, c, "f", fileEntry("/f", f), time.Minute)
	if err := c.Delete(ctx, "f"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := c.DeleteBody(ctx, f.ID, f.Chunks); err != nil {
		t.Fatalf("DeleteBody: %v", err)
	}
	for _, ref := range []entry.BodyFile{a, b, d, f} {
		if left := chunksLeft(t, e, c, ref.ID, ref.Chunks); left != 0 {
			t.Errorf("body %x: %d chunks left", ref.ID, left)
		}
	}
	logs, err := admin.ACLLog(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		t.Errorf("ACL LOG: %s denied %s (%s)", l.Username, l.Object, l.Reason)
	}
}

// docsACL is the ACL SETUSER line of docs/l2.md ("Sharing one Redis
// between tiers", written for the tier web in namespace shop) for user with
// password.
func docsACL(t *testing.T, user, password string) []any {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "l2.md"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(doc)) {
		if !strings.HasPrefix(line, "ACL SETUSER tc-shop-web ") {
			continue
		}
		var args []any
		for i, f := range strings.Fields(line) {
			switch {
			case i == 2:
				f = user
			case f == ">PASSWORD":
				f = ">" + password
			}
			args = append(args, f)
		}
		return args
	}
	t.Fatal("docs/l2.md has no line starting with ACL SETUSER tc-shop-web")
	return nil
}
