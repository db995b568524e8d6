package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
)

// MinHerdKeys is the smallest key space whose every band has a key.
const MinHerdKeys = 200

// Band is one slice of the herd's key space and the share of requests it
// gets. Keys within a band are picked uniformly: the skew is in the bands.
type Band struct {
	Name  string
	Share float64 // fraction of all requests
	First int     // first key
	Count int     // number of keys
	// Missing bands request URLs that 404.
	Missing bool
}

// Herd is the thundering-herd key mix: 80% of requests go to the hottest
// 0.5% of keys (50 of 10,000), 15% to the next 4.5% (450), 4% to the next
// 45% (4,500), and 1% to URLs that do not exist (the remaining 5,000 keys,
// as /missing/<n>). It implements Chooser over its Targets, where target i
// is key i.
type Herd struct {
	Bands   []Band
	Targets []Target
	cum     []float64
}

// HerdConfig describes the URLs of a herd.
type HerdConfig struct {
	// Base is the sidecar's URL; key k is <Base>/bytes/<k>?size=..&ttl=..&swr=..
	// An empty Base gives origin-form targets (/bytes/<k>?...), for a run
	// over Config.Bases.
	Base string
	Keys int
	// Size, TTL and SWR are passed to the demo origin's /bytes route.
	Size, TTL, SWR int
}

// NewHerd lays out the bands and URLs of cfg.
func NewHerd(cfg HerdConfig) (*Herd, error) {
	if cfg.Base != "" {
		if err := CheckLoopback(cfg.Base); err != nil {
			return nil, fmt.Errorf("--base: %w", err)
		}
	}
	if cfg.Keys < MinHerdKeys {
		return nil, fmt.Errorf("--keys: must be >= %d", MinHerdKeys)
	}
	if cfg.Size < 0 || cfg.TTL < 0 || cfg.SWR < 0 {
		return nil, errors.New("--size, --ttl, --swr: must be >= 0")
	}
	hot := cfg.Keys * 5 / 1000
	warm := cfg.Keys * 45 / 1000
	cool := cfg.Keys * 450 / 1000
	h := &Herd{Bands: []Band{
		{Name: "hot", Share: 0.80, First: 0, Count: hot},
		{Name: "warm", Share: 0.15, First: hot, Count: warm},
		{Name: "cool", Share: 0.04, First: hot + warm, Count: cool},
		{Name: "missing", Share: 0.01, First: hot + warm + cool, Count: cfg.Keys - hot - warm - cool, Missing: true},
	}}
	base := strings.TrimSuffix(cfg.Base, "/")
	query := fmt.Sprintf("?size=%d&ttl=%d&swr=%d", cfg.Size, cfg.TTL, cfg.SWR)
	h.Targets = make([]Target, 0, cfg.Keys)
	var cum float64
	for _, b := range h.Bands {
		cum += b.Share
		h.cum = append(h.cum, cum)
		for k := b.First; k < b.First+b.Count; k++ {
			if b.Missing {
				h.Targets = append(h.Targets, Target{URL: base + "/missing/" + strconv.Itoa(k), Missing: true})
			} else {
				h.Targets = append(h.Targets, Target{URL: base + "/bytes/" + strconv.Itoa(k) + query})
			}
		}
	}
	return h, nil
}

// Choose picks a band by its share, then a key in it uniformly.
func (h *Herd) Choose(r *rand.Rand) int {
	x := r.Float64()
	b := h.Bands[len(h.Bands)-1]
	for i := range h.Bands {
		if x < h.cum[i] {
			b = h.Bands[i]
			break
		}
	}
	return b.First + r.IntN(b.Count)
}

// BandOf returns the band that key k belongs to.
func (h *Herd) BandOf(k int) Band {
	for _, b := range h.Bands {
		if k < b.First+b.Count {
			return b
		}
	}
	return h.Bands[len(h.Bands)-1]
}

// OriginStats is what the demo origin's /stats says.
type OriginStats struct {
	Requests int64 `json:"requests"`
	// Bytes counts the body bytes the origin sent, as sent.
	Bytes       int64 `json:"bytes,omitempty"`
	Inflight    int64 `json:"inflight"`
	MaxInflight int64 `json:"max_inflight"`
	// ByClass counts the origin's requests by route, conditional or not,
	// and status: "bytes 200", "bytes conditional 304", "missing 404".
	ByClass map[string]int64 `json:"by_class,omitempty"`
	// PacedDoneUnixNano is when the origin finished its last body sent
	// with ?rate= (0: none).
	PacedDoneUnixNano int64 `json:"paced_done_unix_ns,omitempty"`
}

// ResetOriginStats zeroes the demo origin's counters (POST <statsURL>/reset).
func ResetOriginStats(ctx context.Context, client *http.Client, statsURL string) error {
	u := strings.TrimSuffix(statsURL, "/") + "/reset"
	_, err := originStatsCall(ctx, client, http.MethodPost, u)
	return err
}

// ReadOriginStats reads the demo origin's counters (GET <statsURL>).
func ReadOriginStats(ctx context.Context, client *http.Client, statsURL string) (OriginStats, error) {
	return originStatsCall(ctx, client, http.MethodGet, statsURL)
}

func originStatsCall(ctx context.Context, client *http.Client, method, u string) (OriginStats, error) {
	var s OriginStats
	if err := CheckLoopback(u); err != nil {
		return s, fmt.Errorf("--origin-stats: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return s, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, fmt.Errorf("origin stats: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return s, fmt.Errorf("origin stats: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return s, fmt.Errorf("origin stats: %s %s: %s", method, u, resp.Status)
	}
	if method != http.MethodGet {
		return s, nil
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("origin stats: %s %s: %w", method, u, err)
	}
	return s, nil
}
