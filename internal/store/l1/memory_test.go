package l1

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

func heapInUse() int64 {
	runtime.GC()
	runtime.GC() // the second clears sync.Pool's victim cache
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestMemoryBound fills L1 with four times MaxSize of entries and checks
// the Go heap it holds against the bound in the package comment.
//
// Measured (MaxSize 32 MiB in 64 shards of 512 KiB, go1.26 linux/amd64),
// heap held beyond MaxSize once full:
//   - entries of 100 B to 4 KiB (24k entries): +1.9 MiB (6%);
//   - entries of 100 B to 64 KiB (3k entries): +4.4 MiB (14%), mostly the
//     64 scratch buffers grown to ~64 KiB each;
//   - the same plus an entry of MaxEntrySize() in every shard: +32 MiB
//     (100%), every scratch buffer now a whole shard.
//
// New itself holds MaxSize + 0.9 MiB.
func TestMemoryBound(t *testing.T) {
	cfg := Config{MaxSize: 32 << 20, MaxEntrySize: 512 << 10, Shards: 64, LifeWindow: time.Hour}
	// allowed is the overhead over MaxSize the test accepts: the package
	// comment's bound for scratch buffers of up to scratch bytes, 48 bytes
	// of index per entry and 2 MiB for the runtime and start-up maps.
	allowed := func(scratch, entries int64) int64 {
		return int64(cfg.Shards)*(scratch+entryOverhead) + 48*entries + 2<<20
	}
	tests := []struct {
		name     string
		smallest int
		largest  int
		// worstCase also sets a limit-size entry into every shard.
		worstCase bool
	}{
		{"entries of 100 B to 4 KiB", 100, 4 << 10, false},
		{"entries of 100 B to 64 KiB", 100, 64 << 10, false},
		{"maximum-size entries in every shard", 100, 64 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := heapInUse()
			c, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			afterNew := heapInUse()

			rng := rand.New(rand.NewPCG(5, 6))
			e := response("h", "/", 0)
			body := make([]byte, c.MaxEntrySize())
			var written int64
			var kb []byte
			for i := 0; written < 4*cfg.MaxSize; i++ {
				// Log-uniform between smallest and largest.
				size := int(float64(tt.smallest) * math.Exp(rng.Float64()*math.Log(float64(tt.largest)/float64(tt.smallest))))
				if tt.worstCase && i%50 == 0 {
					size = int(c.MaxEntrySize()) - 300
				}
				e.Body = body[:size]
				kb = strconv.AppendInt(append(kb[:0], "GET http://h/"...), int64(i), 10)
				if err := c.Set(string(kb), e); err != nil {
					t.Fatal(err)
				}
				written += int64(entry.EncodedSize(e))
			}
			e, body = nil, nil

			s := c.Stats()
			held := heapInUse() - before
			overhead := held - cfg.MaxSize
			scratch := int64(tt.largest)
			if tt.worstCase {
				scratch = c.MaxEntrySize()
			}
			allowed := allowed(scratch, s.Entries)
			t.Logf("wrote %d MiB; %d entries, %.1f MiB live; heap after New +%.1f MiB, after fill +%.1f MiB: MaxSize + %.1f MiB (%.0f%%), allowed + %.1f MiB",
				written>>20, s.Entries, float64(s.Bytes)/(1<<20), float64(afterNew-before)/(1<<20),
				float64(held)/(1<<20), float64(overhead)/(1<<20), 100*float64(overhead)/float64(cfg.MaxSize),
				float64(allowed)/(1<<20))
			if s.Bytes > cfg.MaxSize {
				t.Errorf("Bytes = %d exceeds MaxSize", s.Bytes)
			}
			if overhead > allowed {
				t.Errorf("heap held %d bytes over MaxSize, allowed %d", overhead, allowed)
			}
			runtime.KeepAlive(c)
		})
	}
}

// TestStartupCommitsLittleMemory checks that allocating every queue whole
// in New costs address space and heap accounting but not resident memory:
// the kernel commits pages as entries are written.
func TestStartupCommitsLittleMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/statm"); err != nil {
		t.Skip("needs /proc/self/statm")
	}
	debug.FreeOSMemory() // so that earlier tests' garbage is not returned mid-measurement
	before := rss(t)
	c, err := New(context.Background(), defaultSizes())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	grown := rss(t) - before
	t.Logf("New(defaultSizes()) grew the resident set by %.1f MiB (MaxSize %d MiB)", float64(grown)/(1<<20), defaultSizes().MaxSize>>20)
	if grown > defaultSizes().MaxSize/4 {
		t.Errorf("New made %d bytes resident, want well under MaxSize", grown)
	}
	runtime.KeepAlive(c)
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(fmt.Errorf("statm %q: %w", b, err))
	}
	return pages * int64(os.Getpagesize())
}
