package store

import (
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/test/testredis"
)

// partialAt is a stored partial response: bytes 0-4 of a 10-byte
// representation, received at now and fresh for a minute.
func partialAt(now time.Time, target string) *entry.Entry {
	e := response(now, target, time.Minute)
	e.Kind = entry.KindPartial
	e.Body = []byte("01234")
	e.Partial = &entry.Partial{Length: 10, Spans: []entry.Span{{Start: 0, End: 4}}}
	return e
}

// A partial response is local to the replica that received it: neither
// Set nor SetShared writes it to L2 (other replicas, and older sidecars,
// never see one), and a write of the key queued before it does not land
// after it.
func TestPartialResponsesStayInL1(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	rc := rawClient(t, srv.Addr())
	ctx := testCtx(t)

	viaSet, viaShared := keyFor("/set"), keyFor("/shared")
	mustSet(t, f.s, viaSet, partialAt(clk.Now(), "/set"))
	if err := f.s.SetShared(ctx, viaShared, partialAt(clk.Now(), "/shared")); err != nil {
		t.Fatalf("SetShared: %v", err)
	}
	// A complete response queued for L2, then a partial one of the same
	// key: the part cancels the queued write if it is still queued; if
	// the writer took it first, L2 holds that older complete response (a
	// replica whose part lacks bytes looks there), never the part.
	queued := keyFor("/queued")
	mustSet(t, f.s, queued, response(clk.Now(), "/queued", time.Minute))
	mustSet(t, f.s, queued, partialAt(clk.Now(), "/queued"))
	if err := f.s.Close(); err != nil { // flushes what is queued
		t.Fatal(err)
	}
	reader, err := l2.New(l2.Config{Addrs: []string{srv.Addr()}, Prefix: testPrefix(t), Timeout: relaxedTimeout})
	if err != nil {
		t.Fatalf("l2.New: %v", err)
	}
	t.Cleanup(func() { _ = reader.Close() })
	for _, k := range []string{viaSet, viaShared, queued} {
		switch {
		case k == queued:
			if e, err := reader.Get(ctx, k); err == nil && e.Kind != entry.KindResponse {
				t.Errorf("%q: L2 holds a %v entry; want nothing or the older complete response", k, e.Kind)
			}
		case inL2(t, rc, testPrefix(t), k):
			t.Errorf("%q: a partial response reached L2", k)
		}
		got, err := f.l1.Get(k)
		if err != nil || got.Kind != entry.KindPartial || got.Partial == nil {
			t.Errorf("%q: L1 has %+v, %v; want the partial response", k, got, err)
		}
	}
}
