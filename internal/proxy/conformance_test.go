package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Details of RFC 9110 and RFC 9111 that the conformance suite does not
// reach (validators without Last-Modified, responses without Date, Age on
// a miss, public on a status, Vary spelt over several lines, 304s without
// Date) and Accept-Language normalization, each against a real origin:
// what reached the origin and what the client got.

// RFC 9110 §13.1.3, RFC 9111 §4.3.2: a stored response without
// Last-Modified is compared by its Date.
func TestIfModifiedSinceWithoutLastModifiedComparesTheDate(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=600", "body"))
	miss := f.get("/ims")
	expect(t, miss, 200, "MISS")
	stored := miss.header.Get("Date")
	d, err := http.ParseTime(stored)
	if err != nil {
		t.Fatalf("Date %q: %v", stored, err)
	}
	at := func(off time.Duration) string { return d.Add(off).UTC().Format(http.TimeFormat) }
	tests := []struct {
		name   string
		ims    string
		status int
	}{
		{"a client date equal to the stored Date gets 304", at(0), 304},
		{"a client date after the stored Date gets 304", at(time.Hour), 304},
		{"a client date before the stored Date gets the response", at(-time.Second), 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.get("/ims", "If-Modified-Since", tt.ims)
			expect(t, r, tt.status, "HIT; layer=l1")
			if tt.status == 304 && r.body != "" {
				t.Errorf("304 with a body %q", r.body)
			}
		})
	}
	if n := f.origin.count(); n != 1 {
		t.Fatalf("origin saw %d requests, want 1: conditionals are answered from the cache", n)
	}
}

// RFC 9110 §6.6.1: a response that came without Date is stored with the
// time it arrived, which hits then carry and If-Modified-Since compares.
func TestAResponseWithoutDateIsStoredWithTheTimeItArrived(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil // the origin sends no Date at all
		cacheFor("max-age=600", "undated")(w, r)
	})
	miss := f.get("/nodate")
	expect(t, miss, 200, "MISS")
	f.clock.Advance(10 * time.Second)
	hit := f.get("/nodate")
	expect(t, hit, 200, "HIT; layer=l1")
	if hit.header.Get("Date") != miss.header.Get("Date") {
		t.Errorf("the hit's Date %q differs from the miss's %q: it must be the stored arrival time",
			hit.header.Get("Date"), miss.header.Get("Date"))
	}
	received, err := http.ParseTime(miss.header.Get("Date"))
	if err != nil {
		t.Fatal(err)
	}
	ims := received.Add(5 * time.Second).UTC().Format(http.TimeFormat)
	expect(t, f.get("/nodate", "If-Modified-Since", ims), 304, "HIT; layer=l1")
	if got := f.origin.last().Header.Get("If-Modified-Since"); got != "" {
		t.Errorf("the origin saw If-Modified-Since %q", got)
	}
}

// RFC 9111 §4.2.3: a miss carries the Age its stored entry has: the
// origin's Age plus the response delay, or the apparent age from Date.
func TestAMissCarriesTheAgeOfItsStoredEntry(t *testing.T) {
	tests := []struct {
		name     string
		cc       string
		origin   func(o *origin, w http.ResponseWriter)
		wantMiss string // "" = no Age
		wantHit  string
	}{
		{"the origin's Age plus a two-second delay", "max-age=600", func(o *origin, w http.ResponseWriter) {
			w.Header().Set("Age", "30")
			o.clock.Advance(2 * time.Second) // the origin takes two seconds
		}, "32", "32"},
		{"an origin Date twenty seconds old", "max-age=600", func(o *origin, w http.ResponseWriter) {
			w.Header().Set("Date", o.clock.Now().Add(-20*time.Second).UTC().Format(http.TimeFormat))
		}, "20", "20"},
		{"an invalid origin Age is replaced", "max-age=600", func(o *origin, w http.ResponseWriter) {
			w.Header().Set("Age", "soon")
		}, "0", "0"},
		{"a response fresh from the origin goes without Age", "max-age=600", func(*origin, http.ResponseWriter) {}, "", "0"},
		{"an unstored response is measured too", "no-store", func(o *origin, w http.ResponseWriter) {
			w.Header().Set("Age", "5")
			o.clock.Advance(time.Second)
		}, "6", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o *origin
			o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				tt.origin(o, w)
				cacheFor(tt.cc, "aged")(w, r)
			})
			f := newFixtureFor(t, "", o)
			miss := f.get("/age")
			expect(t, miss, 200, "MISS")
			if got := miss.header.Values("Age"); strings.Join(got, ",") != tt.wantMiss {
				t.Errorf("miss Age %q, want %q", got, tt.wantMiss)
			}
			if tt.wantHit == "" {
				return
			}
			hit := f.get("/age")
			expect(t, hit, 200, "HIT; layer=l1")
			if got := hit.header.Get("Age"); got != tt.wantHit {
				t.Errorf("hit Age %q, want %q (the same clock: no time passed)", got, tt.wantHit)
			}
		})
	}
}

// RFC 9111 §4.2.2 and §5.2.2.9: public makes a status that is not
// cacheable by default heuristically cacheable.
func TestPublicMakesAStatusHeuristicallyCacheable(t *testing.T) {
	tests := []struct {
		name   string
		status int
		cc     string
		second string
		origin int
	}{
		{"a public 599 with Last-Modified is reused", 599, "public", "HIT; layer=l1", 1},
		{"a public 403 with Last-Modified is reused", 403, "public", "HIT; layer=l1", 1},
		{"a 599 without public is not stored", 599, "", "MISS", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o *origin
			o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Last-Modified", o.clock.Now().Add(-10*time.Hour).UTC().Format(http.TimeFormat))
				if tt.cc != "" {
					w.Header().Set("Cache-Control", tt.cc)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, "odd status")
			})
			f := newFixtureFor(t, "", o)
			expect(t, f.get("/odd"), tt.status, "MISS")
			f.clock.Advance(30 * time.Minute) // within the heuristic hour (10% of 10h)
			expect(t, f.get("/odd"), tt.status, tt.second)
			if n := o.count(); n != tt.origin {
				t.Errorf("origin saw %d requests, want %d", n, tt.origin)
			}
			if got := o.last().Header.Get("If-Modified-Since"); got != "" {
				t.Errorf("the origin was asked to revalidate (If-Modified-Since %q)", got)
			}
		})
	}
}

// echoVary answers with the request's values of the Vary fields, varying
// on them.
func echoVary(vary ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", strings.Join(vary, ", "))
		w.Header().Set("Cache-Control", "max-age=600")
		for _, name := range vary {
			fmt.Fprintf(w, "%s=%q;", name, r.Header.Values(name))
		}
	}
}

// defaults.normalizeAcceptLanguage: Accept-Language compared by meaning.
func TestAcceptLanguageNormalization(t *testing.T) {
	t.Run("on, a reordered, recased and respaced list is a hit", func(t *testing.T) {
		f := newFixture(t, "defaults: {normalizeAcceptLanguage: true}", echoVary("Accept-Language"))
		first := f.get("/lang", "Accept-Language", "en, de;q=0.5")
		expect(t, first, 200, "MISS")
		if got := f.origin.last().Header.Values("Accept-Language"); strings.Join(got, "|") != "en, de;q=0.5" {
			t.Errorf("the origin got Accept-Language %q, want the client's own value", got)
		}
		r := f.get("/lang", "Accept-Language", " DE;q=0.50 ,EN")
		expect(t, r, 200, "HIT; layer=l1")
		if r.body != first.body {
			t.Errorf("hit body %q, want the stored %q", r.body, first.body)
		}
		// Weights stay meaningful: another preference is another variant.
		expect(t, f.get("/lang", "Accept-Language", "de, en;q=0.5"), 200, "MISS")
		if n := f.origin.count(); n != 2 {
			t.Errorf("origin saw %d requests, want 2", n)
		}
	})
	t.Run("off by default, the list is keyed as received", func(t *testing.T) {
		f := newFixture(t, "", echoVary("Accept-Language"))
		expect(t, f.get("/lang", "Accept-Language", "en, de"), 200, "MISS")
		expect(t, f.get("/lang", "Accept-Language", "de, en"), 200, "MISS")
		expect(t, f.get("/lang", "Accept-Language", "en,de"), 200, "HIT; layer=l1") // RFC 9111 §4.1 spacing
	})
}

// RFC 9111 §4.1: how a Vary field was split into lines never selects
// another variant, whichever request stored the response, for one or
// several Vary fields, on every request.
func TestVaryFieldsSplitOverLinesSelectTheSameVariant(t *testing.T) {
	tests := []struct {
		name        string
		vary        []string
		fill, again []string // request header name, value pairs
	}{
		{"a list stored, then the same members on separate lines", []string{"Foo"},
			[]string{"Foo", "1, 2"}, []string{"Foo", "1", "Foo", "2"}},
		{"separate lines stored, then the same members as a list", []string{"Foo"},
			[]string{"Foo", "1", "Foo", "2"}, []string{"Foo", "1, 2"}},
		{"several Vary fields, each split another way", []string{"Foo", "Bar", "Baz"},
			[]string{"Foo", "1, 2", "Bar", "a", "Bar", "b", "Baz", "x"},
			[]string{"Foo", "1", "Foo", "2", "Bar", "a,b", "Baz", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "", echoVary(tt.vary...))
			first := f.get("/split", tt.fill...)
			expect(t, first, 200, "MISS")
			sent := f.origin.last().Header
			for i := 0; i+1 < len(tt.fill); i += 2 {
				if !strings.Contains(strings.Join(sent.Values(tt.fill[i]), ", "), tt.fill[i+1]) {
					t.Errorf("the origin got %s %q, want the client's lines", tt.fill[i], sent.Values(tt.fill[i]))
				}
			}
			for range 3 {
				r := f.get("/split", tt.again...)
				expect(t, r, 200, "HIT; layer=l1")
				if r.body != first.body {
					t.Fatalf("body %q, want the stored %q", r.body, first.body)
				}
			}
			// The members in another order are another value.
			reordered := []string{"Foo", "2", "Foo", "1"}
			for i := 0; i+1 < len(tt.again); i += 2 {
				if tt.again[i] != "Foo" {
					reordered = append(reordered, tt.again[i], tt.again[i+1])
				}
			}
			expect(t, f.get("/split", reordered...), 200, "MISS")
			if n := f.origin.count(); n != 2 {
				t.Errorf("origin saw %d requests, want 2", n)
			}
		})
	}
}

// A request collapsed onto a fill is served the fill's response when its
// Vary field is the same value split another way.
func TestAWaiterWithTheVaryFieldSplitOtherwiseSharesTheFill(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int64
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release
		echoVary("Foo")(w, r)
	})
	leader := make(chan response, 1)
	go func() { leader <- f.get("/coal", "Foo", "1, 2") }()
	waitFor(t, func() bool { return arrived.Load() == 1 }, "the leader's fill to reach the origin")
	waiter := make(chan response, 1)
	go func() { waiter <- f.get("/coal", "Foo", "1", "Foo", "2") }()
	waitFor(t, func() bool { return coalescedCount(f) == 1 }, "the second request to wait on the fill")
	close(release)
	l, w := <-leader, <-waiter
	expect(t, l, 200, "MISS")
	expect(t, w, 200, "MISS; coalesced")
	if w.body != l.body {
		t.Errorf("waiter body %q, leader body %q", w.body, l.body)
	}
	if n := f.origin.count(); n != 1 {
		t.Errorf("origin saw %d requests, want 1", n)
	}
}

// A 304 without Date refreshes the stored response as of its arrival
// (RFC 9110 §6.6.1), not as of the stored Date: otherwise the refreshed
// entry would count the whole time since the first fill as its age and
// be stale again at once.
func TestA304WithoutDateRefreshesTheEntry(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.Header()["Date"] = nil
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		cacheFor("max-age=10", "body")(w, r)
	})
	expect(t, f.get("/304"), 200, "MISS")
	f.clock.Advance(20 * time.Second)
	expect(t, f.get("/304"), 200, "REVALIDATED")
	r := f.get("/304")
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Age") != "0" {
		t.Errorf("Age %q, want 0 right after the 304", r.header.Get("Age"))
	}
	if n := f.origin.count(); n != 2 {
		t.Errorf("origin saw %d requests, want 2", n)
	}
}
