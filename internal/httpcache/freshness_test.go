package httpcache_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestCurrentAge(t *testing.T) {
	tests := []struct {
		name string
		s    httpcache.Stored
		now  time.Time
		want time.Duration
	}{
		{"a new entry is its initial age", httpcache.Stored{ResponseTime: t0, InitialAge: sec(5)}, t0, sec(5)},
		{"resident time is added", httpcache.Stored{ResponseTime: t0, InitialAge: sec(5)}, t0.Add(time.Minute), sec(65)},
		{"a clock that went back adds no resident time", httpcache.Stored{ResponseTime: t0, InitialAge: sec(5)},
			t0.Add(-time.Hour), sec(5)},
		{"a negative initial age counts as 0", httpcache.Stored{ResponseTime: t0, InitialAge: -time.Hour}, t0.Add(time.Second), sec(1)},
		{"a zero response time does not overflow", httpcache.Stored{InitialAge: time.Duration(math.MaxInt64)}, t0, 2 * maxDelta},
		{"a far future now does not overflow", httpcache.Stored{ResponseTime: t0}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), maxDelta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.CurrentAge(tt.s, tt.now); got != tt.want {
				t.Errorf("CurrentAge = %v, want %v", got, tt.want)
			}
		})
	}
}

func rcc(kv ...string) httpcache.RequestCC { return httpcache.ParseRequestCC(hdr(kv...)) }

func TestEvaluate(t *testing.T) {
	// entry: stored at t0, one minute of freshness, 30 s of
	// stale-while-revalidate; evaluated at t0 + at.
	entry := httpcache.Stored{ResponseTime: t0, Lifetime: time.Minute, StaleWhileRevalidate: 30 * time.Second,
		StaleIfError: time.Hour}
	with := func(f func(*httpcache.Stored)) httpcache.Stored {
		s := entry
		f(&s)
		return s
	}
	tests := []struct {
		name string
		s    httpcache.Stored
		req  httpcache.RequestCC
		at   time.Duration
		want httpcache.Use
	}{
		{"a fresh entry is served", entry, rcc(), 10 * time.Second, httpcache.UseFresh},
		{"an entry at age 0 is fresh", entry, rcc(), 0, httpcache.UseFresh},
		{"the initial age counts towards staleness",
			with(func(s *httpcache.Stored) { s.InitialAge = 50 * time.Second }), rcc(), 20 * time.Second, httpcache.UseStaleRevalidate},
		{"an entry exactly at its lifetime is stale", with(func(s *httpcache.Stored) { s.StaleWhileRevalidate = 0 }), rcc(),
			time.Minute, httpcache.UseValidate},
		{"a stale entry within stale-while-revalidate is served and refreshed", entry, rcc(), 70 * time.Second,
			httpcache.UseStaleRevalidate},
		{"the end of stale-while-revalidate is still inside it", entry, rcc(), 90 * time.Second, httpcache.UseStaleRevalidate},
		{"a stale entry past stale-while-revalidate is validated", entry, rcc(), 91 * time.Second, httpcache.UseValidate},
		{"a stale entry without stale-while-revalidate is validated",
			with(func(s *httpcache.Stored) { s.StaleWhileRevalidate = 0 }), rcc(), 61 * time.Second, httpcache.UseValidate},
		{"a zero lifetime entry is validated", with(func(s *httpcache.Stored) { s.Lifetime, s.StaleWhileRevalidate = 0, 0 }),
			rcc(), 0, httpcache.UseValidate},
		{"a negative lifetime counts as 0", with(func(s *httpcache.Stored) { s.Lifetime = -time.Hour }), rcc(), 0,
			httpcache.UseStaleRevalidate},

		{"a stored no-cache entry is always validated", with(func(s *httpcache.Stored) { s.NoCache = true }), rcc(), 0,
			httpcache.UseValidate},
		{"a request no-cache validates a fresh entry", entry, rcc("Cache-Control", "no-cache"), 0, httpcache.UseValidate},
		{"a request Pragma no-cache validates a fresh entry", entry, rcc("Pragma", "no-cache"), 0, httpcache.UseValidate},
		{"a request no-cache wins over max-stale", entry, rcc("Cache-Control", "no-cache, max-stale"), 70 * time.Second,
			httpcache.UseValidate},

		{"a request max-age older than the entry is satisfied", entry, rcc("Cache-Control", "max-age=30"), 20 * time.Second,
			httpcache.UseFresh},
		{"a request max-age equal to the age is satisfied", entry, rcc("Cache-Control", "max-age=20"), 20 * time.Second,
			httpcache.UseFresh},
		{"a request max-age younger than the entry validates a fresh entry", entry, rcc("Cache-Control", "max-age=10"),
			20 * time.Second, httpcache.UseValidate},
		{"a request max-age=0 validates a fresh entry", entry, rcc("Cache-Control", "max-age=0"), time.Second, httpcache.UseValidate},
		{"a request max-age stops stale-while-revalidate", entry, rcc("Cache-Control", "max-age=3600"), 70 * time.Second,
			httpcache.UseValidate},
		{"a request max-age with max-stale accepts a stale entry young enough", entry,
			rcc("Cache-Control", "max-age=100, max-stale=60"), 70 * time.Second, httpcache.UseStale},
		{"max-stale does not rescue a failed request max-age", entry, rcc("Cache-Control", "max-age=10, max-stale"),
			70 * time.Second, httpcache.UseValidate},

		{"a request min-fresh that the entry meets is satisfied", entry, rcc("Cache-Control", "min-fresh=30"), 20 * time.Second,
			httpcache.UseFresh},
		{"a request min-fresh exactly met is satisfied", entry, rcc("Cache-Control", "min-fresh=40"), 20 * time.Second,
			httpcache.UseFresh},
		{"a request min-fresh the entry cannot meet validates it", entry, rcc("Cache-Control", "min-fresh=50"), 20 * time.Second,
			httpcache.UseValidate},
		{"max-stale does not rescue a failed min-fresh", entry, rcc("Cache-Control", "min-fresh=5, max-stale"), 70 * time.Second,
			httpcache.UseValidate},
		{"a request min-fresh stops stale-while-revalidate", entry, rcc("Cache-Control", "min-fresh=0"), 70 * time.Second,
			httpcache.UseValidate},

		{"max-stale without a value accepts any staleness", entry, rcc("Cache-Control", "max-stale"), 1000 * time.Hour,
			httpcache.UseStale},
		{"max-stale with a value accepts staleness up to it", entry, rcc("Cache-Control", "max-stale=120"), 180 * time.Second,
			httpcache.UseStale},
		{"max-stale past its value falls back to validation", entry, rcc("Cache-Control", "max-stale=5"), 200 * time.Second,
			httpcache.UseValidate},
		{"max-stale past its value still allows stale-while-revalidate", entry, rcc("Cache-Control", "max-stale=5"),
			80 * time.Second, httpcache.UseStaleRevalidate},
		{"max-stale does not touch a fresh entry", entry, rcc("Cache-Control", "max-stale"), time.Second, httpcache.UseFresh},

		{"must-revalidate forbids max-stale", with(func(s *httpcache.Stored) { s.MustRevalidate = true }),
			rcc("Cache-Control", "max-stale"), 70 * time.Second, httpcache.UseValidate},
		{"must-revalidate forbids stale-while-revalidate", with(func(s *httpcache.Stored) { s.MustRevalidate = true }),
			rcc(), 70 * time.Second, httpcache.UseValidate},
		{"must-revalidate still serves a fresh entry", with(func(s *httpcache.Stored) { s.MustRevalidate = true }),
			rcc(), 10 * time.Second, httpcache.UseFresh},

		{"a clock that went back keeps the entry fresh", entry, rcc(), -time.Hour, httpcache.UseFresh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0.Add(tt.at)
			got, age := httpcache.Evaluate(tt.s, tt.req, now)
			if got != tt.want {
				t.Errorf("Evaluate = %v, want %v", got, tt.want)
			}
			if want := httpcache.CurrentAge(tt.s, now); age != want {
				t.Errorf("age = %v, want CurrentAge %v", age, want)
			}
		})
	}
}

func TestStaleOnErrorOK(t *testing.T) {
	entry := httpcache.Stored{ResponseTime: t0, Lifetime: time.Minute, StaleIfError: 10 * time.Minute}
	with := func(f func(*httpcache.Stored)) httpcache.Stored {
		s := entry
		f(&s)
		return s
	}
	tests := []struct {
		name string
		s    httpcache.Stored
		req  httpcache.RequestCC
		at   time.Duration
		want bool
	}{
		{"a stale entry within stale-if-error may be served", entry, rcc(), 5 * time.Minute, true},
		{"the end of stale-if-error is still inside it", entry, rcc(), 11 * time.Minute, true},
		{"a stale entry past stale-if-error may not be served", entry, rcc(), 12 * time.Minute, false},
		{"a fresh entry with a window may be served", entry, rcc("Cache-Control", "no-cache"), time.Second, true},
		{"without any window nothing is served", with(func(s *httpcache.Stored) { s.StaleIfError = 0 }), rcc(), time.Second, false},
		{"the request's stale-if-error extends the window", entry, rcc("Cache-Control", "stale-if-error=3600"), 30 * time.Minute, true},
		{"the request's stale-if-error alone opens a window", with(func(s *httpcache.Stored) { s.StaleIfError = 0 }),
			rcc("Cache-Control", "stale-if-error=60"), 90 * time.Second, true},
		{"a smaller request stale-if-error does not shrink the entry's", entry, rcc("Cache-Control", "stale-if-error=1"),
			5 * time.Minute, true},
		{"must-revalidate forbids serving stale on error", with(func(s *httpcache.Stored) { s.MustRevalidate = true }),
			rcc("Cache-Control", "stale-if-error=3600"), 2 * time.Minute, false},
		{"no-cache forbids serving stale on error", with(func(s *httpcache.Stored) { s.NoCache = true }),
			rcc("Cache-Control", "stale-if-error=3600"), 2 * time.Minute, false},
		{"a negative window counts as none", with(func(s *httpcache.Stored) { s.StaleIfError = -time.Hour }), rcc(), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.StaleOnErrorOK(tt.s, tt.req, t0.Add(tt.at)); got != tt.want {
				t.Errorf("StaleOnErrorOK = %v, want %v", got, tt.want)
			}
		})
	}
}

// RFC 9111 §4.2.4: a disconnected cache may serve what no directive
// forbids, within the tier's window and the request's own limits.
func TestStaleIfUnreachableOK(t *testing.T) {
	entry := httpcache.Stored{ResponseTime: t0, Lifetime: time.Minute, StaleIfUnreachable: 10 * time.Minute}
	with := func(f func(*httpcache.Stored)) httpcache.Stored {
		s := entry
		f(&s)
		return s
	}
	tests := []struct {
		name string
		s    httpcache.Stored
		req  httpcache.RequestCC
		at   time.Duration
		want bool
	}{
		{"a stale entry within the window may be served", entry, rcc(), 5 * time.Minute, true},
		{"the end of the window is still inside it", entry, rcc(), 11 * time.Minute, true},
		{"a stale entry past the window may not be served", entry, rcc(), 11*time.Minute + time.Second, false},
		{"an entry stored already stale may be served", with(func(s *httpcache.Stored) { s.Lifetime = 0 }), rcc(),
			time.Minute, true},
		{"the initial age counts towards staleness", with(func(s *httpcache.Stored) { s.InitialAge = 10 * time.Minute }), rcc(),
			2 * time.Minute, false},
		{"a window of 0 turns it off", with(func(s *httpcache.Stored) { s.StaleIfUnreachable = 0 }), rcc(), 2 * time.Minute, false},
		{"a negative window counts as none", with(func(s *httpcache.Stored) { s.StaleIfUnreachable = -time.Hour }), rcc(), 0, false},
		{"stale-if-error does not widen it", with(func(s *httpcache.Stored) { s.StaleIfError = time.Hour }), rcc(),
			30 * time.Minute, false},
		{"must-revalidate forbids it", with(func(s *httpcache.Stored) { s.MustRevalidate = true }), rcc(), 2 * time.Minute, false},
		{"no-cache forbids it", with(func(s *httpcache.Stored) { s.NoCache = true }), rcc(), 2 * time.Minute, false},
		{"the request's no-cache forbids it", entry, rcc("Cache-Control", "no-cache"), 2 * time.Minute, false},
		{"Pragma no-cache forbids it", entry, rcc("Pragma", "no-cache"), 2 * time.Minute, false},
		{"the request's max-age rules out an older entry", entry, rcc("Cache-Control", "max-age=60"), 2 * time.Minute, false},
		{"the request's max-age admits a younger stale entry", with(func(s *httpcache.Stored) { s.Lifetime = 0 }),
			rcc("Cache-Control", "max-age=60"), 30 * time.Second, true},
		{"the request's min-fresh rules out a stale entry", entry, rcc("Cache-Control", "min-fresh=1"), 2 * time.Minute, false},
		{"a fresh entry meeting min-fresh may be served", entry, rcc("Cache-Control", "min-fresh=10"), 30 * time.Second, true},
		{"a bounded max-stale rules out a staler entry", entry, rcc("Cache-Control", "max-stale=30"), 2 * time.Minute, false},
		{"a bounded max-stale admits an entry within it", entry, rcc("Cache-Control", "max-stale=120"), 2 * time.Minute, true},
		{"an unbounded max-stale does not widen the window", entry, rcc("Cache-Control", "max-stale"), time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.StaleIfUnreachableOK(tt.s, tt.req, t0.Add(tt.at)); got != tt.want {
				t.Errorf("StaleIfUnreachableOK = %v, want %v", got, tt.want)
			}
		})
	}
}

// RFC 9111 §4.2.3 and §5.1: the Age of a response served on a miss.
func TestForwardedAge(t *testing.T) {
	tests := []struct {
		name   string
		resp   http.Header
		age    time.Duration
		want   string
		wantOK bool
	}{
		{"a response under a second old without Age goes without one", hdr(), 999 * time.Millisecond, "", false},
		{"a response delay of a second adds Age", hdr(), 1500 * time.Millisecond, "1", true},
		{"the origin's Age is replaced by the computed one", hdr("Age", "10"), 12 * time.Second, "12", true},
		{"the origin's Age of 0 stays 0", hdr("Age", "0"), 0, "0", true},
		{"an invalid origin Age is replaced", hdr("Age", "junk"), 0, "0", true},
		{"a list of origin Ages becomes one value", hdr("Age", "5, 7", "Age", "9"), 5 * time.Second, "5", true},
		{"a huge age is 2^31", hdr(), time.Duration(math.MaxInt64), "2147483648", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := httpcache.ForwardedAge(tt.resp, tt.age)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ForwardedAge = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAgeHeader(t *testing.T) {
	tests := []struct {
		name string
		age  time.Duration
		want string
	}{
		{"zero is 0", 0, "0"},
		{"fractions round down", 1999 * time.Millisecond, "1"},
		{"whole seconds are printed", time.Hour, "3600"},
		{"a negative age is 0", -time.Second, "0"},
		{"a huge age is 2^31", time.Duration(math.MaxInt64), "2147483648"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.AgeHeader(tt.age); got != tt.want {
				t.Errorf("AgeHeader(%v) = %q, want %q", tt.age, got, tt.want)
			}
		})
	}
}

func TestUseString(t *testing.T) {
	for u, want := range map[httpcache.Use]string{httpcache.UseFresh: "UseFresh", httpcache.UseStaleRevalidate: "UseStaleRevalidate",
		httpcache.UseStale: "UseStale", httpcache.UseValidate: "UseValidate", 9: "Use(9)"} {
		if got := u.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", u, got, want)
		}
	}
}
