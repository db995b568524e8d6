package l1

import (
	"fmt"
	"runtime"
	"testing"
)

const benchKeys = 10000

// benchCache is 64 MiB in the default 256 shards, holding benchKeys
// entries of 1 KiB bodies. After filling it, it runs Gets until the GC has
// cycled a few times: the heap between the live size and the GC's goal is
// then paged in, as in a process that has been serving for a while. (In a
// VM the first touch of a page can cost 20 µs, which would otherwise
// dominate a short benchmark.)
func benchCache(b *testing.B) (*Cache, []string) {
	cfg := defaultSizes()
	cfg.MaxSize, cfg.MaxEntrySize = 64<<20, 256<<10
	c := newCache(b, cfg)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("GET https://shop.example.com/api/products/%d?lang=en", i)
		mustSet(b, c, keys[i], response("shop.example.com", keys[i][len("GET https://shop.example.com"):], 1024))
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	for gc, i := m.NumGC, 0; m.NumGC < gc+3; i++ {
		if _, err := c.Get(keys[i%benchKeys]); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 0 {
			runtime.ReadMemStats(&m)
		}
	}
	return c, keys
}

// BenchmarkGet is an L1 hit of a 1 KiB-body response with 6 headers.
func BenchmarkGet(b *testing.B) {
	c, keys := benchCache(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.Get(keys[i%benchKeys]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGetParallel(b *testing.B) {
	c, keys := benchCache(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := c.Get(keys[i%benchKeys]); err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
}

// BenchmarkSet replaces existing 1 KiB-body entries (the revalidation
// case: delete, then set).
func BenchmarkSet(b *testing.B) {
	c, keys := benchCache(b)
	e := response("shop.example.com", "/api/products/1?lang=en", 1024)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := c.Set(keys[i%benchKeys], e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSetNew stores entries under keys not in the cache.
func BenchmarkSetNew(b *testing.B) {
	c, _ := benchCache(b)
	e := response("shop.example.com", "/api/products/1?lang=en", 1024)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("GET https://shop.example.com/api/products/%d?lang=en", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%len(keys) == 0 {
			b.StopTimer()
			c.Reset()
			b.StartTimer()
		}
		if err := c.Set(keys[i%len(keys)], e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
