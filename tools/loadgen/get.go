package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Get is what one GET of a (large) body measured: when its first body
// byte and its last arrived, and how fast it streamed.
type Get struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	XCache string `json:"x_cache"` // NormalizeXCache
	Bytes  int64  `json:"bytes"`
	// Wall-clock times, nanoseconds since the Unix epoch: the request
	// sent, the response headers, the first body byte, the last one.
	StartedUnixNano   int64 `json:"started_unix_ns"`
	HeadersUnixNano   int64 `json:"headers_unix_ns"`
	FirstByteUnixNano int64 `json:"first_byte_unix_ns"` // 0 for an empty body
	DoneUnixNano      int64 `json:"done_unix_ns"`
	// FirstByteS and TotalS are seconds from the request to the first
	// body byte and to the last.
	FirstByteS float64 `json:"first_byte_s"`
	TotalS     float64 `json:"total_s"`
	// MBPerS is Bytes / TotalS in 10^6 bytes per second; BodyMBPerS the
	// same over the body's own time (first byte to last).
	MBPerS     float64 `json:"mb_per_s"`
	BodyMBPerS float64 `json:"body_mb_per_s"`
}

// getBuffer is the read size of FetchOne: large, so the client is not
// what limits a loopback transfer.
const getBuffer = 1 << 20

// FetchOne sends one GET for url (loopback only) and reads the whole body,
// noting when its first byte and its last arrived.
func FetchOne(ctx context.Context, client *http.Client, url, host string) (*Get, error) {
	if err := CheckLoopback(url); err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	if host != "" {
		req.Host = host
	}
	g := &Get{URL: url}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	headers := time.Now()
	g.Status, g.XCache = resp.StatusCode, NormalizeXCache(resp.Header.Get("X-Cache"))
	buf := make([]byte, getBuffer)
	var first time.Time
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && first.IsZero() {
			first = time.Now()
		}
		g.Bytes += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the body after %d bytes: %w", g.Bytes, err)
		}
	}
	done := time.Now()
	g.StartedUnixNano, g.HeadersUnixNano, g.DoneUnixNano = start.UnixNano(), headers.UnixNano(), done.UnixNano()
	g.TotalS = done.Sub(start).Seconds()
	if g.TotalS > 0 {
		g.MBPerS = float64(g.Bytes) / g.TotalS / 1e6
	}
	if !first.IsZero() {
		g.FirstByteUnixNano = first.UnixNano()
		g.FirstByteS = first.Sub(start).Seconds()
		if body := done.Sub(first).Seconds(); body > 0 {
			g.BodyMBPerS = float64(g.Bytes) / body / 1e6
		}
	}
	return g, nil
}
