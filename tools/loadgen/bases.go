package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// MaxBases bounds the number of base URLs of a run.
const MaxBases = 64

// maxBasesFile bounds the size of a --bases-file.
const maxBasesFile = 64 << 10

// Bases is the list of servers that a run's origin-form targets
// ("/path?query") are sent to: each request goes to the next base in turn,
// round robin over all workers. The list can be replaced while the run goes
// on, as a Kubernetes Service's endpoints change; every list is checked to
// be loopback-only before it is used.
type Bases struct {
	cur atomic.Pointer[[]string]
	rr  atomic.Uint64
}

// NewBases returns a list holding urls.
func NewBases(urls []string) (*Bases, error) {
	b := &Bases{}
	if err := b.Set(urls); err != nil {
		return nil, err
	}
	return b, nil
}

// Set replaces the list. It refuses an empty list, more than MaxBases
// entries, and any URL that is not an http(s) URL of a loopback host
// without a query. A trailing "/" is dropped so that base+"/path" is
// well formed.
func (b *Bases) Set(urls []string) error {
	if len(urls) == 0 {
		return errors.New("--base: at least one is required")
	}
	if len(urls) > MaxBases {
		return fmt.Errorf("--base: at most %d (got %d)", MaxBases, len(urls))
	}
	clean := make([]string, len(urls))
	for i, u := range urls {
		if err := CheckLoopback(u); err != nil {
			return fmt.Errorf("--base: %w", err)
		}
		if strings.ContainsAny(u, "?#") {
			return fmt.Errorf("--base: %q: a base URL has no query or fragment", u)
		}
		clean[i] = strings.TrimSuffix(u, "/")
	}
	b.cur.Store(&clean)
	return nil
}

// Next returns the base the next request goes to.
func (b *Bases) Next() string {
	l := *b.cur.Load()
	return l[(b.rr.Add(1)-1)%uint64(len(l))]
}

// Current returns the list in force (not to be modified).
func (b *Bases) Current() []string { return *b.cur.Load() }

// ReadBasesFile reads a list of base URLs, one a line; blank lines and
// lines starting with # are ignored. The URLs are checked by Set, not here.
func ReadBasesFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--bases-file: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxBasesFile+1)); err != nil {
		return nil, fmt.Errorf("--bases-file: %w", err)
	}
	if buf.Len() > maxBasesFile {
		return nil, fmt.Errorf("--bases-file: %s is larger than %d bytes", path, maxBasesFile)
	}
	var urls []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		urls = append(urls, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--bases-file: %w", err)
	}
	return urls, nil
}

// watch re-reads path every period until ctx ends and puts each new list
// in force; changed is called (from this goroutine only) with every list
// put in force or every failed reload, so that the run can record when its
// servers changed. A file that cannot be read, is empty or names a
// non-loopback URL leaves the list in force unchanged.
func (b *Bases) watch(ctx context.Context, path string, period time.Duration, changed func(urls []string, err error)) {
	t := time.NewTicker(period)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		urls, err := ReadBasesFile(path)
		if err == nil && slices.Equal(trimmed(urls), b.Current()) {
			lastErr = ""
			continue
		}
		if err == nil {
			err = b.Set(urls)
		}
		if err != nil {
			// Report a failure once, not at every tick.
			if err.Error() != lastErr {
				changed(nil, err)
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
		changed(b.Current(), nil)
	}
}

func trimmed(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.TrimSuffix(u, "/")
	}
	return out
}
