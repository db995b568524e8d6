package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FreshnessTrial is how long one cached response was served as a HIT.
type FreshnessTrial struct {
	// Offset is the fraction of the wall-clock second at which the
	// response was fetched (the trials spread it over the second).
	Offset float64 `json:"offset"`
	// FreshS is the time from the fetch to the first answer that was not
	// a HIT; Then is that answer's X-Cache (NormalizeXCache), "" when the
	// bound ran out first.
	FreshS float64 `json:"fresh_s"`
	Then   string  `json:"then"`
}

// FreshnessConfig describes a freshness probe.
type FreshnessConfig struct {
	// Base is the cache's URL; trial i fetches
	// <Base>/bytes/<Prefix><i>?size=16&ttl=<TTL> (a key nothing asked for
	// before), then asks again every Poll until the answer is no longer
	// a HIT, for at most TTL + 3 s.
	Base   string
	Prefix string
	Trials int
	TTL    int
	Poll   time.Duration
	Host   string
}

// MaxFreshnessTrials bounds a probe.
const MaxFreshnessTrials = 100

// ProbeFreshness measures how long a cache serves a response with
// max-age=TTL as fresh (X-Cache HIT), trial after trial. Trial i fetches
// at i/Trials of a wall-clock second, so a cache whose clock has whole
// seconds (an HTTP Date, nginx's time) shows its rounding in the mean.
func ProbeFreshness(ctx context.Context, client *http.Client, cfg FreshnessConfig) ([]FreshnessTrial, error) {
	switch {
	case cfg.Trials < 1 || cfg.Trials > MaxFreshnessTrials:
		return nil, fmt.Errorf("--trials: must be between 1 and %d", MaxFreshnessTrials)
	case cfg.TTL < 1 || cfg.TTL > 60:
		return nil, fmt.Errorf("--ttl: must be between 1 and 60 seconds")
	case cfg.Poll <= 0:
		return nil, fmt.Errorf("--poll: must be > 0")
	case strings.ContainsAny(cfg.Prefix, "/?#% "):
		return nil, fmt.Errorf("--prefix: %q must not contain / ? # %% or spaces", cfg.Prefix)
	}
	if err := CheckLoopback(cfg.Base); err != nil {
		return nil, fmt.Errorf("--base: %w", err)
	}
	base := strings.TrimSuffix(cfg.Base, "/")
	trials := make([]FreshnessTrial, 0, cfg.Trials)
	for i := range cfg.Trials {
		// Start at the next second + i/Trials.
		now := time.Now()
		at := now.Truncate(time.Second).Add(time.Second + time.Duration(i)*time.Second/time.Duration(cfg.Trials))
		if !sleepCtx(ctx, at.Sub(now)) {
			return trials, ctx.Err()
		}
		url := base + "/bytes/" + cfg.Prefix + strconv.Itoa(i) + "?size=16&ttl=" + strconv.Itoa(cfg.TTL)
		start := time.Now()
		if _, err := xcacheOf(ctx, client, url, cfg.Host); err != nil {
			return trials, err
		}
		tr := FreshnessTrial{Offset: float64(start.Sub(start.Truncate(time.Second))) / float64(time.Second)}
		deadline := start.Add(time.Duration(cfg.TTL)*time.Second + 3*time.Second)
		for time.Now().Before(deadline) {
			xc, err := xcacheOf(ctx, client, url, cfg.Host)
			if err != nil {
				return trials, err
			}
			if XCacheToken(xc) != "HIT" {
				tr.Then = xc
				break
			}
			if !sleepCtx(ctx, cfg.Poll) {
				return trials, ctx.Err()
			}
		}
		tr.FreshS = time.Since(start).Seconds()
		trials = append(trials, tr)
	}
	return trials, nil
}

func xcacheOf(ctx context.Context, client *http.Client, url, host string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return NormalizeXCache(resp.Header.Get("X-Cache")), nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
