package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// Hits on one replica (sampled: here every one) make its entries the
// tier's hottest; a new replica loads the hottest into its empty L1.
func TestWarmStartLoadsTheHottestEntries(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	a := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk, opts: func(o *Options) { o.HotSampleEvery = 1 }})
	ctx := testCtx(t)
	rc := rawClient(t, srv.Addr())

	hits := []int{2, 6, 0, 4} // per /w/<i>
	for i := range hits {
		mustSet(t, a.s, keyFor(fmt.Sprintf("/w/%d", i)), response(clk.Now(), fmt.Sprintf("/w/%d", i), time.Hour))
	}
	waitFor(t, 5*time.Second, "the entries to reach L2", func() bool {
		for i := range hits {
			if !inL2(t, rc, testPrefix(t), keyFor(fmt.Sprintf("/w/%d", i))) {
				return false
			}
		}
		return true
	})
	var e entry.Entry
	for i, n := range hits {
		for range n {
			if layer, err := a.s.Get(ctx, keyFor(fmt.Sprintf("/w/%d", i)), &e); err != nil || layer != LayerL1 {
				t.Fatalf("Get = %q, %v; want an l1 hit", layer, err)
			}
		}
	}
	want := []string{keyFor("/w/1"), keyFor("/w/3"), keyFor("/w/0")}
	waitFor(t, 5*time.Second, "the hits to be recorded", func() bool {
		hot, err := a.l2.Hottest(ctx, 3, 0)
		var got []string
		for _, h := range hot {
			got = append(got, h.Key)
		}
		return err == nil && slices.Equal(got, want)
	})

	b := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	n, err := b.s.WarmStart(ctx, 2, 0)
	if err != nil || n != 2 {
		t.Fatalf("WarmStart(2) = %d, %v; want 2", n, err)
	}
	for i, key := range []string{keyFor("/w/1"), keyFor("/w/3"), keyFor("/w/0")} {
		_, err := b.l1.Get(key)
		if loaded := err == nil; loaded != (i < 2) {
			t.Errorf("%s in the warmed L1: %v, want %v", key, loaded, i < 2)
		}
	}

	// maxBytes: room for one entry only.
	c := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	one := int64(entry.EncodedSize(response(clk.Now(), "/w/1", time.Hour)))
	if n, err := c.s.WarmStart(ctx, 3, one); err != nil || n != 1 {
		t.Fatalf("WarmStart(3, %d bytes) = %d, %v; want 1", one, n, err)
	}

	// A replica whose clock says the entries are long dead loads none.
	late := newClock()
	late.Advance(3 * time.Hour)
	d := newFixture(t, storeOpts{addr: srv.Addr(), clock: late})
	if n, err := d.s.WarmStart(ctx, 3, 0); err != nil || n != 0 {
		t.Fatalf("WarmStart with every entry past its use = %d, %v; want 0", n, err)
	}
}

// With sampling off nothing is recorded.
func TestNoHitsAreRecordedWithSamplingOff(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) { o.HotSampleEvery = -1 }})
	ctx := context.Background()
	key := keyFor("/cold")
	if err := f.s.SetShared(ctx, key, response(time.Now(), "/cold", time.Hour)); err != nil {
		t.Fatal(err)
	}
	var e entry.Entry
	for range 10 {
		if _, err := f.s.Get(ctx, key, &e); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.s.Close(); err != nil { // flush whatever was queued
		t.Fatal(err)
	}
	if hot, err := f.l2.Hottest(ctx, 10, 0); err != nil || len(hot) != 0 {
		t.Fatalf("Hottest = %d entries, %v; want none", len(hot), err)
	}
}
