package entry

import (
	"testing"
	"time"
)

func TestExpire(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	response := func(mod func(e *Entry)) Entry {
		e := Entry{
			Kind: KindResponse, RequestTime: t0.Add(-time.Second), ResponseTime: t0,
			InitialAge: 10 * time.Second, Lifetime: time.Hour,
			StaleWhileRevalidate: time.Minute, StaleIfError: 2 * time.Minute,
		}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	cases := []struct {
		name              string
		e                 Entry
		at                time.Time
		concerned, change bool
		freshUntil        time.Time // after Expire
	}{
		{
			name: "a fresh response becomes stale at the purge and keeps its stale windows",
			e:    response(nil), at: t0.Add(5 * time.Minute),
			concerned: true, change: true, freshUntil: t0.Add(5 * time.Minute),
		},
		{
			name: "a response already stale at the purge is concerned but unchanged",
			e:    response(func(e *Entry) { e.Lifetime = 30 * time.Second }), at: t0.Add(5 * time.Minute),
			concerned: true, change: false, freshUntil: t0.Add(20 * time.Second),
		},
		{
			name: "a response stored with an initial age ends at the purge all the same",
			e:    response(func(e *Entry) { e.InitialAge = 50 * time.Minute }), at: t0.Add(time.Minute),
			concerned: true, change: true, freshUntil: t0.Add(time.Minute),
		},
		{
			name: "a response requested at the purge or later was fetched after it and stays fresh",
			e:    response(nil), at: t0.Add(-time.Second),
			concerned: false, change: false, freshUntil: t0.Add(50*time.Minute - 10*time.Second + 10*time.Minute),
		},
		{
			name: "a response received after the purge on a clock ahead of the purger's ends at its own arrival age",
			e:    response(func(e *Entry) { e.RequestTime = time.Time{} }), at: t0.Add(-time.Minute),
			concerned: true, change: true, freshUntil: t0,
		},
		{
			name: "a stored partial response is marked like a whole one",
			e:    response(func(e *Entry) { e.Kind = KindPartial }), at: t0.Add(5 * time.Minute),
			concerned: true, change: true, freshUntil: t0.Add(5 * time.Minute),
		},
		{
			name: "a Vary marker is not content and is left alone",
			e:    response(func(e *Entry) { e.Kind = KindVary }), at: t0.Add(time.Minute),
			concerned: false, change: false, freshUntil: t0.Add(time.Hour - 10*time.Second),
		},
		{
			name: "a hit-for-miss record is left alone",
			e:    response(func(e *Entry) { e.Kind = KindUncacheable }), at: t0.Add(time.Minute),
			concerned: false, change: false, freshUntil: t0.Add(time.Hour - 10*time.Second),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := c.e
			before := EncodedSize(&e)
			concerned, changed := e.Expire(c.at)
			if concerned != c.concerned || changed != c.change {
				t.Fatalf("Expire = (concerned %v, changed %v), want (%v, %v)", concerned, changed, c.concerned, c.change)
			}
			if got := e.FreshUntil(); !got.Equal(c.freshUntil) {
				t.Fatalf("fresh until %s after Expire, want %s", got.Sub(t0), c.freshUntil.Sub(t0))
			}
			want := c.e
			want.Lifetime = e.Lifetime
			if err := equalEntries(&e, &want); err != nil {
				t.Fatalf("Expire changed more than the lifetime: %v", err)
			}
			if EncodedSize(&e) != before {
				t.Fatalf("encoded size %d after Expire, %d before", EncodedSize(&e), before)
			}
			if !e.StaleDeadline().Equal(c.freshUntil.Add(2 * time.Minute)) {
				t.Fatalf("stale deadline %s, want the end of freshness plus the longer stale window", e.StaleDeadline().Sub(t0))
			}
		})
	}
}
