package store

import (
	"context"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// BenchmarkGetL1Hit is the hit path through Layered, against l1.GetInto
// alone: what the layer adds (with an L2 behind it, the hit sampling).
func BenchmarkGetL1Hit(b *testing.B) {
	srv := testredis.Start(b)
	for _, bc := range []struct {
		name string
		addr string
	}{{"l1 only", ""}, {"with l2", srv.Addr()}} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, storeOpts{addr: bc.addr})
			key := keyFor("/bench")
			e := response(time.Now(), "/bench", time.Hour)
			e.Body = make([]byte, 1024)
			if err := f.s.Set(context.Background(), key, e); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var got entry.Entry
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.s.Get(ctx, key, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("l1.GetInto", func(b *testing.B) {
		f := newFixture(b, storeOpts{})
		key := keyFor("/bench")
		e := response(time.Now(), "/bench", time.Hour)
		e.Body = make([]byte, 1024)
		if err := f.l1.Set(key, e); err != nil {
			b.Fatal(err)
		}
		var got entry.Entry
		b.ReportAllocs()
		for b.Loop() {
			if err := f.l1.GetInto(key, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
