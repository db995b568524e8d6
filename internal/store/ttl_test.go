package store

import (
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

func TestL2TTL(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	const grace = time.Hour
	resp := func(mod func(e *entry.Entry)) *entry.Entry {
		e := &entry.Entry{Kind: entry.KindResponse, Status: 200, ResponseTime: now, Lifetime: time.Minute}
		if mod != nil {
			mod(e)
		}
		return e
	}
	tests := map[string]struct {
		e    *entry.Entry
		want time.Duration
	}{
		"a fresh response lives to the end of its freshness": {
			resp(nil), time.Minute,
		},
		"the initial age shortens it": {
			resp(func(e *entry.Entry) { e.InitialAge = 20 * time.Second }), 40 * time.Second,
		},
		"time since the response shortens it": {
			resp(func(e *entry.Entry) { e.ResponseTime = now.Add(-45 * time.Second) }), 15 * time.Second,
		},
		"the longer stale window is added": {
			resp(func(e *entry.Entry) { e.StaleWhileRevalidate, e.StaleIfError = 30*time.Second, 5*time.Minute }),
			6 * time.Minute,
		},
		"the stale-if-unreachable window keeps a response that long past its freshness": {
			resp(func(e *entry.Entry) { e.StaleIfUnreachable = 10 * time.Minute }), 11 * time.Minute,
		},
		"a longer stale-if-error wins over the stale-if-unreachable window": {
			resp(func(e *entry.Entry) { e.StaleIfError, e.StaleIfUnreachable = time.Hour, 10*time.Minute }), 61 * time.Minute,
		},
		"the revalidation grace comes on top of the stale-if-unreachable window": {
			resp(func(e *entry.Entry) {
				e.StaleIfUnreachable = 10 * time.Minute
				e.Header = []entry.Field{{Name: "Etag", Value: `"v1"`}}
			}),
			11*time.Minute + grace,
		},
		"a response past its stale-if-unreachable window without a validator is not written": {
			resp(func(e *entry.Entry) {
				e.ResponseTime = now.Add(-12 * time.Minute)
				e.StaleIfUnreachable = 10 * time.Minute
			}),
			-time.Minute,
		},
		"an ETag adds the revalidation grace": {
			resp(func(e *entry.Entry) { e.Header = []entry.Field{{Name: "Etag", Value: `"v1"`}} }),
			time.Minute + grace,
		},
		"a Last-Modified adds the revalidation grace": {
			resp(func(e *entry.Entry) {
				e.Header = []entry.Field{{Name: "Last-Modified", Value: "Tue, 14 Nov 2023 22:13:20 GMT"}}
			}),
			time.Minute + grace,
		},
		"an empty validator adds nothing": {
			resp(func(e *entry.Entry) { e.Header = []entry.Field{{Name: "Etag", Value: ""}} }), time.Minute,
		},
		"a stale response with a validator is kept for revalidation": {
			resp(func(e *entry.Entry) {
				e.ResponseTime = now.Add(-10 * time.Minute)
				e.Header = []entry.Field{{Name: "Etag", Value: `"v1"`}}
			}),
			grace - 9*time.Minute,
		},
		"a response past its stale deadline without a validator is not written": {
			resp(func(e *entry.Entry) { e.ResponseTime = now.Add(-2 * time.Minute) }), -time.Minute,
		},
		"a Vary marker lives by its own times and never gets grace": {
			&entry.Entry{Kind: entry.KindVary, ResponseTime: now, Lifetime: 10 * time.Minute, StaleIfError: time.Minute,
				Header: []entry.Field{{Name: "Etag", Value: `"v1"`}}},
			11 * time.Minute,
		},
		"a hit-for-miss record lives by its own times": {
			&entry.Entry{Kind: entry.KindUncacheable, ResponseTime: now, Lifetime: 5 * time.Second}, 5 * time.Second,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := l2TTL(tc.e, now, grace); got != tc.want {
				t.Fatalf("l2TTL = %s, want %s", got, tc.want)
			}
		})
	}
}
