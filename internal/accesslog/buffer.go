package accesslog

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// buffer holds lines between the requests that add them and the one
// goroutine that writes them out (run). It is a double buffer: requests
// append to cur under mu (a copy of one line, nothing else, so the lock
// is held for well under a microsecond); run swaps cur with its own empty
// spare and writes the full one without the lock. When the writer is slow
// (a blocked stdout), cur fills and further lines are dropped and counted:
// a request never waits for the log, and memory stays within two buffers.
// This is bufio's job done for many writers at once: lines reach the
// writer in large chunks, every flush interval or as soon as cur is half
// full.
type buffer struct {
	mu      sync.Mutex
	size    int // of each half: cur, and run's spare
	cur     []byte
	lines   int // in cur
	dropped prometheus.Counter
	// kick asks run to write now (cur is half full).
	kick chan struct{}
}

func newBuffer(size int, dropped prometheus.Counter) *buffer {
	return &buffer{size: size, cur: make([]byte, 0, size), dropped: dropped, kick: make(chan struct{}, 1)}
}

// add copies line into the buffer, or drops it when it does not fit.
func (b *buffer) add(line []byte) {
	b.mu.Lock()
	if len(b.cur)+len(line) > cap(b.cur) {
		b.mu.Unlock()
		b.dropped.Inc()
		return
	}
	b.cur = append(b.cur, line...)
	b.lines++
	half := len(b.cur) >= cap(b.cur)/2
	b.mu.Unlock()
	if half {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// swap takes the waiting lines, leaving spare (emptied) in their place.
func (b *buffer) swap(spare []byte) ([]byte, int) {
	b.mu.Lock()
	out, n := b.cur, b.lines
	b.cur, b.lines = spare[:0], 0
	b.mu.Unlock()
	return out, n
}

// run writes the waiting lines to w at every tick and kick, and once more
// when ctx ends, then returns. Lines whose write fails are counted as
// dropped; errLog hears of the first failure of a run of them.
func (b *buffer) run(ctx context.Context, w io.Writer, tick <-chan time.Time, errLog func(error)) {
	spare := make([]byte, 0, b.size)
	failing := false
	flush := func() {
		out, n := b.swap(spare)
		if n > 0 {
			if _, err := w.Write(out); err != nil {
				b.dropped.Add(float64(n))
				if !failing && errLog != nil {
					errLog(err)
				}
				failing = true
			} else {
				failing = false
			}
		}
		spare = out
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-tick:
		case <-b.kick:
		}
		flush()
	}
}
