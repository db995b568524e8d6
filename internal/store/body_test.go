package store

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/test/testredis"
)

// testBody is size pseudo-random bytes.
func testBody(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, ^seed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fileResponse is response() with its body in a file: the reference to
// b, whose id is derived from seed.
func fileResponse(now time.Time, target string, lifetime time.Duration, b []byte, seed uint64) *entry.Entry {
	e := response(now, target, lifetime)
	e.Body = nil
	var id [16]byte
	copy(id[:], testBody(16, seed+1000))
	e.File = &entry.BodyFile{ID: id, Size: int64(len(b)), CRC: crc32.Checksum(b, castagnoli)}
	return e
}

// bodySource is an OpenBody over b that counts opens and can hold a read
// that reaches off stall until released.
type bodySource struct {
	b       []byte
	opens   atomic.Int32
	stallAt int64         // a read reaching this offset waits (0: never)
	reached chan struct{} // closed when a read reaches stallAt
	release chan struct{} // close to let it go on
	once    sync.Once
}

func newSource(b []byte, stallAt int64) *bodySource {
	return &bodySource{b: b, stallAt: stallAt, reached: make(chan struct{}), release: make(chan struct{})}
}

func (s *bodySource) open() (BodyReader, error) {
	s.opens.Add(1)
	return (*sourceReader)(s), nil
}

type sourceReader bodySource

func (r *sourceReader) ReadAt(p []byte, off int64) (int, error) {
	s := (*bodySource)(r)
	if s.stallAt > 0 && off+int64(len(p)) > s.stallAt {
		s.once.Do(func() { close(s.reached) })
		select {
		case <-s.release:
		case <-time.After(20 * time.Second):
			return 0, errors.New("test source: never released")
		}
	}
	return bytes.NewReader(s.b).ReadAt(p, off)
}

func (r *sourceReader) Close() error { return nil }

func failingOpen() (BodyReader, error) { return nil, errors.New("test: the body must not be read") }

func readBody(t *testing.T, s *Layered, ref entry.BodyFile) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := s.ReadBody(testCtx(t), ref, &buf)
	return buf.Bytes(), err
}

func TestAFileBackedEntryReachesAnotherReplicaWithItsBody(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	for i, size := range []int{1 << 20, 3 << 19, 4 << 20, 16 << 20} {
		key := keyFor("/big/" + string(rune('a'+i)))
		body := testBody(size, uint64(i))
		e := fileResponse(time.Now(), "/big", time.Hour, body, uint64(i))
		src := newSource(body, 0)
		if err := a.s.SetWithBody(testCtx(t), key, e, src.open); err != nil {
			t.Fatalf("SetWithBody: %v", err)
		}
		// L1 has the entry as given, at once.
		var got entry.Entry
		if layer, err := a.s.Get(testCtx(t), key, &got); err != nil || layer != LayerL1 || got.File == nil || *got.File != *e.File {
			t.Fatalf("replica A: Get = %s, %v, %+v; want its own entry from L1", layer, err, got.File)
		}
		waitFor(t, 10*time.Second, "the entry in L2", func() bool { return inL2(t, rc, testPrefix(t), key) })
		layer, err := b.s.Get(testCtx(t), key, &got)
		if err != nil || layer != LayerL2 {
			t.Fatalf("replica B: Get = %s, %v; want an L2 hit", layer, err)
		}
		want := *e.File
		want.Chunks = l2.ChunksFor(int64(size))
		if got.File == nil || *got.File != want {
			t.Fatalf("replica B: File = %+v, want %+v", got.File, want)
		}
		back, err := readBody(t, b.s, *got.File)
		if err != nil || !bytes.Equal(back, body) {
			t.Fatalf("replica B: ReadBody = %d bytes, %v; want the %d bytes stored", len(back), err, size)
		}
		if n := src.opens.Load(); n != 1 {
			t.Fatalf("the body was opened %d times, want once", n)
		}
	}
}

func TestSetKeepsAFileBackedEntryInL1Only(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	body := testBody(2<<20, 1)
	e := fileResponse(time.Now(), "/local", time.Hour, body, 1)
	mustSet(t, f.s, keyFor("/local"), e)
	if err := f.s.SetShared(testCtx(t), keyFor("/shared"), e); err != nil {
		t.Fatalf("SetShared: %v", err)
	}
	mustSet(t, f.s, keyFor("/inline"), response(time.Now(), "/inline", time.Hour))
	_ = f.s.Close() // flushes the queue
	if !inL2(t, rc, testPrefix(t), keyFor("/inline")) {
		t.Fatal("an inline entry set after a file-backed one is not in L2")
	}
	for _, k := range []string{"/local", "/shared"} {
		if inL2(t, rc, testPrefix(t), keyFor(k)) {
			t.Errorf("%s: a file-backed entry whose body was not handed over is in L2", k)
		}
	}
	if n := l2Errors(f.m, "set"); n != 0 {
		t.Errorf("l2_errors_total{op=set} = %v: a file-backed entry was sent to L2 without its body", n)
	}
	var got entry.Entry
	if err := f.l1.GetInto(keyFor("/local"), &got); err != nil || got.File == nil {
		t.Fatalf("L1: %v, %+v; want the file-backed entry", err, got.File)
	}
}

func TestSetSharedWithBodyShowsTheEntryOnlyOnceItsBodyIsInL2(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	key := keyFor("/shared")
	body := testBody(4<<20+3, 2)
	e := fileResponse(time.Now(), "/shared", time.Hour, body, 2)
	// The read of the third chunk stalls until the test has looked.
	src := newSource(body, 2<<20+1)
	done := make(chan error, 1)
	go func() { done <- a.s.SetSharedWithBody(context.Background(), key, e, src.open) }()
	select {
	case <-src.reached:
	case err := <-done:
		t.Fatalf("SetSharedWithBody returned %v before reading the whole body", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the body was never read")
	}
	var got entry.Entry
	if _, err := b.s.Get(testCtx(t), key, &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another replica found the entry (%v, %+v) before its body was in L2", err, got.File)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatalf("SetSharedWithBody: %v", err)
	}
	if !inL2(t, rc, testPrefix(t), key) {
		t.Fatal("the entry is not in L2 when SetSharedWithBody returns")
	}
	if _, err := b.s.Get(testCtx(t), key, &got); err != nil || got.File == nil {
		t.Fatalf("replica B: Get = %v, %+v", err, got.File)
	}
	if back, err := readBody(t, b.s, *got.File); err != nil || !bytes.Equal(back, body) {
		t.Fatalf("replica B: ReadBody = %d bytes, %v", len(back), err)
	}
}

func TestARefreshedFileEntryExtendsItsChunksWithoutCopyingTheBody(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	rc := rawClient(t, srv.Addr())
	key := keyFor("/refresh")
	body := testBody(3<<20, 3)
	e := fileResponse(clk.Now(), "/refresh", time.Minute, body, 3)
	if err := f.s.SetSharedWithBody(testCtx(t), key, e, newSource(body, 0).open); err != nil {
		t.Fatal(err)
	}
	// A 304 an hour later: same body, new times, a longer life.
	clk.Advance(time.Hour)
	fresh := fileResponse(clk.Now(), "/refresh", 2*time.Hour, body, 3)
	if err := f.s.SetSharedWithBody(testCtx(t), key, fresh, failingOpen); err != nil {
		t.Fatalf("refreshing with the body in L2 already: %v", err)
	}
	chunk := testPrefix(t) + "b:" + hexID(e.File.ID) + ":2"
	if d := rc.PTTL(testCtx(t), chunk).Val(); d < 2*time.Hour-time.Minute {
		t.Fatalf("chunk PTTL %s after the refresh, want about 2h", d)
	}
	got, err := f.l2.Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ResponseTime.Equal(fresh.ResponseTime) {
		t.Fatalf("L2 holds the entry of %s, want the refreshed one of %s", got.ResponseTime, fresh.ResponseTime)
	}
}

func TestReadBodyIsAMissForAMissingOrDamagedChunk(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	ctx := testCtx(t)
	body := testBody(3<<20+1, 4)
	e := fileResponse(time.Now(), "/damaged", time.Hour, body, 4)
	if err := f.s.SetSharedWithBody(ctx, keyFor("/damaged"), e, newSource(body, 0).open); err != nil {
		t.Fatal(err)
	}
	ref := *e.File
	ref.Chunks = l2.ChunksFor(ref.Size)
	chunk := func(i int) string { return testPrefix(t) + "b:" + hexID(ref.ID) + ":" + string(rune('0'+i)) }

	// One byte changed, length kept: only the CRC can tell.
	if err := rc.SetRange(ctx, chunk(1), 12345, "\x00").Err(); err != nil {
		t.Fatal(err)
	}
	if body[1<<20+12345] == 0 {
		t.Fatal("test body already has a zero there; pick another offset")
	}
	if _, err := readBody(t, f.s, ref); !errors.Is(err, ErrBodyCorrupt) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadBody of a changed chunk = %v, want ErrBodyCorrupt (a miss)", err)
	}
	if err := rc.Del(ctx, chunk(1)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := readBody(t, f.s, ref); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadBody with a chunk missing = %v, want ErrNotFound", err)
	}
	// Neither is an L2 failure.
	if n := l2Errors(f.m, "get"); n != 0 {
		t.Fatalf("l2_errors_total{op=get} = %v after misses", n)
	}
	l1only := newFixture(t, storeOpts{})
	if _, err := readBody(t, l1only.s, ref); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadBody without L2 = %v, want ErrNotFound", err)
	}
}

func TestADeleteDuringABodyWriteIsNotUndone(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	key := keyFor("/purged")
	body := testBody(3<<20, 5)
	e := fileResponse(time.Now(), "/purged", time.Hour, body, 5)
	src := newSource(body, 1<<20+1)
	if err := f.s.SetWithBody(testCtx(t), key, e, src.open); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the queued body write never started")
	}
	if err := f.s.Delete(testCtx(t), key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	close(src.release)
	_ = f.s.Close() // waits for the writer
	if inL2(t, rc, testPrefix(t), key) {
		t.Fatal("the entry written after its purge is in L2")
	}
	names, err := rc.Keys(testCtx(t), testPrefix(t)+"b:*").Result()
	if err != nil || len(names) != 0 {
		t.Fatalf("chunks left after the purge: %v, %v", names, err)
	}
}

func TestTheBodyQueueOpensBodiesInTurnAndIsBoundedInBytes(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) { o.BodyQueueBytes = 5 << 20 }})
	rc := rawClient(t, srv.Addr())
	first := testBody(3<<20, 6)
	e1 := fileResponse(time.Now(), "/1", time.Hour, first, 6)
	src1 := newSource(first, 1<<20+1)
	if err := f.s.SetWithBody(testCtx(t), keyFor("/1"), e1, src1.open); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src1.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the first body write never started")
	}
	// 3 MiB in flight: 1 MiB more fits, 2 MiB more does not.
	second := testBody(1<<20, 7)
	src2 := newSource(second, 0)
	if err := f.s.SetWithBody(testCtx(t), keyFor("/2"), fileResponse(time.Now(), "/2", time.Hour, second, 7), src2.open); err != nil {
		t.Fatal(err)
	}
	third := testBody(2<<20, 8)
	src3 := newSource(third, 0)
	if err := f.s.SetWithBody(testCtx(t), keyFor("/3"), fileResponse(time.Now(), "/3", time.Hour, third, 8), src3.open); err != nil {
		t.Fatal(err)
	}
	if n := counter(f.m.L2Dropped); n != 1 {
		t.Fatalf("l2_dropped_writes_total = %v, want 1 (the write past the byte bound)", n)
	}
	if n := src2.opens.Load(); n != 0 {
		t.Fatalf("a queued body was opened %d times before its turn", n)
	}
	close(src1.release)
	waitFor(t, 10*time.Second, "the second entry in L2", func() bool { return inL2(t, rc, testPrefix(t), keyFor("/2")) })
	if src3.opens.Load() != 0 || inL2(t, rc, testPrefix(t), keyFor("/3")) {
		t.Fatal("the dropped write was made")
	}
	waitFor(t, 10*time.Second, "the queue's bytes returned", func() bool { return f.s.bodyQueued.Load() == 0 })
}

func hexID(id [16]byte) string {
	const digits = "0123456789abcdef"
	var b [32]byte
	for i, x := range id {
		b[2*i], b[2*i+1] = digits[x>>4], digits[x&0xf]
	}
	return string(b[:])
}

func TestADeleteDuringASharedBodyWriteIsNotUndone(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	key := keyFor("/purged")
	body := testBody(3<<20, 9)
	e := fileResponse(time.Now(), "/purged", time.Hour, body, 9)
	src := newSource(body, 1<<20+1)
	done := make(chan error, 1)
	go func() { done <- f.s.ShareBody(context.Background(), key, e, src.open) }()
	select {
	case <-src.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the shared body write never started")
	}
	if err := f.s.Delete(testCtx(t), key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatalf("ShareBody: %v", err)
	}
	if inL2(t, rc, testPrefix(t), key) {
		t.Fatal("the entry written after its purge is in L2")
	}
	names, err := rc.Keys(testCtx(t), testPrefix(t)+"b:*").Result()
	if err != nil || len(names) != 0 {
		t.Fatalf("chunks left after the purge: %v, %v", names, err)
	}
}
