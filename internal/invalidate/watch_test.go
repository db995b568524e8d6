package invalidate

import (
	"context"
	"net/url"
	"testing"
	"time"
)

func TestAFillIsOvertakenOnlyByInvalidationsOfItsOwnResource(t *testing.T) {
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	cases := []struct {
		name  string
		act   func(p *Purger)
		tags  []string // the fill's response tags
		store bool
	}{
		{"an unsafe request to another URL does not stop the fill", func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{mustURL("http://shop/other")})
		}, nil, true},
		{"an unsafe request to the same URL stops it", func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{mustURL("https://SHOP:443/page?id=1")})
		}, nil, false},
		{"the same path and query on another host does not stop it", func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{mustURL("http://other/page?id=1")})
		}, nil, true},
		{"another query of the same path does not stop it", func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{mustURL("http://shop/page?id=2")})
		}, nil, true},
		{"an origin-form purge of the URL stops it on every host", func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{URLs: []string{"/page?id=1"}})
		}, nil, false},
		{"a purged prefix covering the URL stops it", func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{Prefix: "/pa"})
		}, nil, false},
		{"a purged prefix elsewhere does not stop it", func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{Prefix: "/api/"})
		}, nil, true},
		{"a purged tag of the response stops it", func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{Tags: []string{"a", "b"}})
		}, []string{"x", "b"}, false},
		{"a purged tag the response does not carry does not stop it", func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{Tags: []string{"a"}})
		}, []string{"x"}, true},
		{"a message from another sidecar about the URL stops it", func(p *Purger) {
			p.HandleMessage([]byte(`{"from":"other","invalidate":["http://shop/page?id=1"]}`))
		}, nil, false},
		{"a message from another sidecar about another URL does not", func(p *Purger) {
			p.HandleMessage([]byte(`{"from":"other","urls":["/page?id=3"]}`))
		}, nil, true},
		{"a resubscription (messages may have been missed) stops every fill", func(p *Purger) {
			p.Subscribed(context.Background(), time.Now())
			p.Subscribed(context.Background(), time.Now())
		}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, _, _ := newPurger(t, "")
			w := p.Watch("shop", "/page?id=1")
			defer w.End()
			c.act(p)
			stored := false
			committed := w.Commit(c.tags, func() { stored = true })
			if committed != c.store || stored != c.store {
				t.Fatalf("Commit = %v (store called: %v), want %v", committed, stored, c.store)
			}
		})
	}
}

func TestAFillThatBeginsAfterAPurgeIsStored(t *testing.T) {
	p, _, _ := newPurger(t, "")
	_, _ = p.Purge(context.Background(), Request{URLs: []string{"/x"}, Tags: []string{"t"}})
	w := p.Watch("shop", "/x")
	defer w.End()
	if !w.Commit([]string{"t"}, func() {}) {
		t.Fatal("a fill that began after the purge was not stored")
	}
}

func TestAnEndedWatchIsForgotten(t *testing.T) {
	ws := NewWatches()
	w := ws.Begin("shop", "/x")
	w.End()
	w.End() // twice is harmless
	ws.mu.Lock()
	n := len(ws.set)
	ws.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d watches left after End", n)
	}
}
