package httpcache_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// RFC 9111 §4.2.1 and §4.2.2, plus the Policy: where the lifetime comes from.
func TestDecideFreshness(t *testing.T) {
	withEtag := func(kv ...string) httpcache.Exchange { return ex(200, append(kv, "ETag", `"v"`)...) }
	mr := func(l time.Duration) httpcache.Decision {
		return httpcache.Decision{Store: true, Lifetime: l, MustRevalidate: true}
	}
	lm := func(ago time.Duration) string { return date(t0.Add(-ago)) }
	tenPct := httpcache.Policy{HeuristicFraction: 0.1}
	runDecide(t, []decideCase{
		{"s-maxage wins over max-age", ex(200, "Cache-Control", "max-age=60, s-maxage=600"), httpcache.Policy{}, mr(sec(600))},
		{"a shorter s-maxage also wins over max-age", ex(200, "Cache-Control", "s-maxage=6, max-age=600"), httpcache.Policy{}, mr(sec(6))},
		{"max-age wins over Expires", ex(200, "Cache-Control", "max-age=60", "Expires", date(t0.Add(time.Hour))), httpcache.Policy{},
			stored(sec(60))},
		{"s-maxage wins over Expires", ex(200, "Cache-Control", "s-maxage=60", "Expires", "0"), httpcache.Policy{}, mr(sec(60))},
		{"Expires minus Date is the lifetime", ex(200, "Expires", date(t0.Add(90*time.Second))), httpcache.Policy{}, stored(sec(90))},
		{"Expires is measured from Date, not from the response time",
			ex(200, "Date", date(t0.Add(-30*time.Second)), "Expires", date(t0.Add(90*time.Second))), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(120), InitialAge: sec(30)}},
		{"Expires without Date is measured from the response time", ex(200, "Date", "-", "Expires", date(t0.Add(time.Minute))),
			httpcache.Policy{}, stored(sec(60))},
		{"Expires with an invalid Date is measured from the response time",
			ex(200, "Date", "garbage", "Expires", date(t0.Add(time.Minute))), httpcache.Policy{}, stored(sec(60))},
		{"Expires in rfc850 format is understood", ex(200, "Expires", t0.Add(time.Minute).Format("Monday, 02-Jan-06 15:04:05 GMT")),
			httpcache.Policy{}, stored(sec(60))},
		{"Expires in asctime format is understood", ex(200, "Expires", t0.Add(time.Minute).Format(time.ANSIC)),
			httpcache.Policy{}, stored(sec(60))},
		{"an Expires in the past means already expired", withEtag("Expires", date(t0.Add(-time.Hour))), httpcache.Policy{}, stored(0)},
		{"an Expires equal to Date means already expired", withEtag("Expires", date(t0)), httpcache.Policy{}, stored(0)},
		{"an invalid Expires means already expired", withEtag("Expires", "0"), httpcache.Policy{}, stored(0)},
		{"an invalid Expires wins over the heuristic", withEtag("Expires", "-1", "Last-Modified", lm(100*time.Hour)), tenPct,
			stored(0)},
		{"an invalid Expires wins over FallbackTTL", withEtag("Expires", "never"), httpcache.Policy{FallbackTTL: time.Hour}, stored(0)},
		{"identical duplicate Expires are used", ex(200, "Expires", date(t0.Add(time.Minute)), "Expires", date(t0.Add(time.Minute))),
			httpcache.Policy{}, stored(sec(60))},
		{"conflicting duplicate Expires mean already expired",
			withEtag("Expires", date(t0.Add(time.Minute)), "Expires", date(t0.Add(time.Hour))), httpcache.Policy{}, stored(0)},
		{"an Expires far in the future clamps to 2^31 seconds", ex(200, "Expires", "Fri, 31 Dec 9999 23:59:59 GMT"),
			httpcache.Policy{}, stored(maxDelta)},
		{"a huge max-age clamps to 2^31 seconds", ex(200, "Cache-Control", "max-age=9999999999999"), httpcache.Policy{},
			stored(maxDelta)},
		{"an invalid max-age means stale even with a future Expires",
			withEtag("Cache-Control", "max-age=-1", "Expires", date(t0.Add(time.Hour))), httpcache.Policy{}, stored(0)},
		{"conflicting max-age values mean stale", withEtag("Cache-Control", "max-age=60, max-age=600"), httpcache.Policy{}, stored(0)},
		{"an invalid max-age means stale even with a valid s-maxage",
			ex(200, "Cache-Control", "max-age=x, s-maxage=60", "ETag", `"v"`), httpcache.Policy{}, mr(0)},
		{"an invalid s-maxage means stale and still demands revalidation",
			ex(200, "Cache-Control", "s-maxage=1.5, max-age=60", "ETag", `"v"`), httpcache.Policy{}, mr(0)},

		{"ForceTTL overrides max-age", ex(200, "Cache-Control", "max-age=60"), httpcache.Policy{ForceTTL: time.Hour}, stored(time.Hour)},
		{"ForceTTL overrides max-age=0", ex(200, "Cache-Control", "max-age=0"), httpcache.Policy{ForceTTL: time.Hour},
			stored(time.Hour)},
		{"ForceTTL overrides s-maxage but s-maxage still demands revalidation",
			ex(200, "Cache-Control", "s-maxage=60"), httpcache.Policy{ForceTTL: time.Hour}, mr(time.Hour)},
		{"ForceTTL overrides an invalid max-age", ex(200, "Cache-Control", "max-age=-5"), httpcache.Policy{ForceTTL: time.Hour},
			stored(time.Hour)},
		{"ForceTTL overrides Expires", ex(200, "Expires", "0"), httpcache.Policy{ForceTTL: time.Minute}, stored(time.Minute)},
		{"ForceTTL applies without any freshness", ex(200), httpcache.Policy{ForceTTL: time.Minute}, stored(time.Minute)},
		{"ForceTTL applies to a 404", ex(404), httpcache.Policy{ForceTTL: time.Minute, NegativeTTL: time.Second},
			stored(time.Minute)},
		{"ForceTTL applies to a 302", ex(302, "Cache-Control", "max-age=5"), httpcache.Policy{ForceTTL: time.Minute},
			stored(time.Minute)},
		{"ForceTTL applies to a 307", ex(307), httpcache.Policy{ForceTTL: time.Minute}, stored(time.Minute)},
		{"ForceTTL does not apply to a 303", ex(303, "Cache-Control", "max-age=5"), httpcache.Policy{ForceTTL: time.Minute},
			stored(sec(5))},
		{"ForceTTL does not apply to a 500", ex(500, "Cache-Control", "max-age=5"), httpcache.Policy{ForceTTL: time.Minute},
			stored(sec(5))},
		{"ForceTTL does not make a 502 storable", ex(502), httpcache.Policy{ForceTTL: time.Minute}, notStored(reasonNotByDefault)},
		{"a negative ForceTTL is ignored", ex(200, "Cache-Control", "max-age=5"), httpcache.Policy{ForceTTL: -time.Minute},
			stored(sec(5))},
		{"a huge ForceTTL clamps to 2^31 seconds", ex(200), httpcache.Policy{ForceTTL: time.Duration(math.MaxInt64)},
			stored(maxDelta)},

		{"FallbackTTL applies to a 200 without explicit freshness", ex(200), httpcache.Policy{FallbackTTL: time.Minute},
			stored(time.Minute)},
		{"FallbackTTL applies to a 301", ex(301), httpcache.Policy{FallbackTTL: time.Minute}, stored(time.Minute)},
		{"FallbackTTL does not apply with max-age", ex(200, "Cache-Control", "max-age=5"), httpcache.Policy{FallbackTTL: time.Minute},
			stored(sec(5))},
		{"FallbackTTL does not apply with Expires", ex(200, "Expires", date(t0.Add(5*time.Second))),
			httpcache.Policy{FallbackTTL: time.Minute}, stored(sec(5))},
		{"FallbackTTL does not apply to a public 500", ex(500, "Cache-Control", "public", "ETag", `"v"`),
			httpcache.Policy{FallbackTTL: time.Minute}, stored(0)},
		{"FallbackTTL wins over the heuristic", ex(200, "Last-Modified", lm(1000*time.Hour)),
			httpcache.Policy{FallbackTTL: time.Minute, HeuristicFraction: 0.1}, stored(time.Minute)},
		{"FallbackTTL covers a 404 when there is no NegativeTTL", ex(404), httpcache.Policy{FallbackTTL: time.Minute},
			stored(time.Minute)},
		{"NegativeTTL applies to a 404", ex(404), httpcache.Policy{NegativeTTL: 10 * time.Second}, stored(sec(10))},
		{"NegativeTTL applies to a 410", ex(410), httpcache.Policy{NegativeTTL: 10 * time.Second}, stored(sec(10))},
		{"NegativeTTL wins over FallbackTTL for a 404", ex(404),
			httpcache.Policy{NegativeTTL: 10 * time.Second, FallbackTTL: time.Hour}, stored(sec(10))},
		{"FallbackTTL still applies to a 200 when NegativeTTL is set", ex(200),
			httpcache.Policy{NegativeTTL: 10 * time.Second, FallbackTTL: time.Hour}, stored(time.Hour)},
		{"explicit freshness wins over NegativeTTL", ex(404, "Cache-Control", "max-age=600"),
			httpcache.Policy{NegativeTTL: 10 * time.Second}, stored(sec(600))},
		{"NegativeTTL does not apply to a 200", ex(200), httpcache.Policy{NegativeTTL: time.Minute}, notStored(reasonNoInfo)},
		{"NegativeTTL does not apply to a 403", ex(403), httpcache.Policy{NegativeTTL: time.Minute}, notStored(reasonNotByDefault)},

		{"the heuristic is a fraction of the time since Last-Modified", ex(200, "Last-Modified", lm(10*time.Hour)), tenPct,
			stored(time.Hour)},
		{"the heuristic is capped at HeuristicMax", ex(200, "Last-Modified", lm(1000*time.Hour)),
			httpcache.Policy{HeuristicFraction: 0.1, HeuristicMax: 2 * time.Hour}, stored(2 * time.Hour)},
		{"the heuristic below HeuristicMax is not raised", ex(200, "Last-Modified", lm(10*time.Hour)),
			httpcache.Policy{HeuristicFraction: 0.1, HeuristicMax: 2 * time.Hour}, stored(time.Hour)},
		{"the heuristic measures from the response time without Date", ex(200, "Date", "-", "Last-Modified", lm(10*time.Hour)),
			tenPct, stored(time.Hour)},
		{"the heuristic is off without a fraction", ex(200, "Last-Modified", lm(10*time.Hour)), httpcache.Policy{}, stored(0)},
		{"the heuristic is not used with explicit freshness", ex(200, "Cache-Control", "max-age=5", "Last-Modified", lm(10*time.Hour)),
			tenPct, stored(sec(5))},
		{"public makes the heuristic apply to a status not cacheable by default",
			ex(500, "Cache-Control", "public", "Last-Modified", lm(10*time.Hour)), tenPct, stored(time.Hour)},
		{"public makes the heuristic apply to an unknown status",
			ex(599, "Cache-Control", "public", "Last-Modified", lm(10*time.Hour)), tenPct, stored(time.Hour)},
		{"the heuristic does not make a status not cacheable by default storable without public",
			ex(500, "Last-Modified", lm(10*time.Hour)), tenPct, notStored(reasonNotByDefault)},
		{"a public status not cacheable by default without Last-Modified has no heuristic lifetime",
			ex(403, "Cache-Control", "public", "ETag", `"v"`), tenPct, stored(0)},
		{"NegativeTTL does not apply to a public 403", ex(403, "Cache-Control", "public", "ETag", `"v"`),
			httpcache.Policy{NegativeTTL: time.Minute}, stored(0)},
		{"a Last-Modified after Date gives no heuristic", ex(200, "Last-Modified", date(t0.Add(time.Hour))), tenPct, stored(0)},
		{"a Last-Modified equal to Date gives a zero heuristic", ex(200, "Last-Modified", date(t0)),
			httpcache.Policy{HeuristicFraction: 0.1, StaleIfError: time.Minute}, httpcache.Decision{Store: true, StaleIfError: time.Minute}},
		{"an invalid Last-Modified gives no heuristic", ex(200, "Last-Modified", "last tuesday"), tenPct, stored(0)},
		{"a huge heuristic clamps to 2^31 seconds", ex(200, "Last-Modified", "Mon, 01 Jan 1900 00:00:00 GMT"),
			httpcache.Policy{HeuristicFraction: 1e9}, stored(maxDelta)},
		{"an infinite fraction clamps to 2^31 seconds", ex(200, "Last-Modified", lm(time.Hour)),
			httpcache.Policy{HeuristicFraction: math.Inf(1)}, stored(maxDelta)},
		{"an infinite fraction with no age gives 0", ex(200, "Last-Modified", lm(0)),
			httpcache.Policy{HeuristicFraction: math.Inf(1)}, stored(0)},
		{"a NaN fraction disables the heuristic", ex(200, "Last-Modified", lm(time.Hour)),
			httpcache.Policy{HeuristicFraction: math.NaN()}, stored(0)},
		{"a negative fraction disables the heuristic", ex(200, "Last-Modified", lm(time.Hour)),
			httpcache.Policy{HeuristicFraction: -1}, stored(0)},

		{"MaxTTL caps max-age", ex(200, "Cache-Control", "max-age=600"), httpcache.Policy{MaxTTL: time.Minute}, stored(time.Minute)},
		{"MaxTTL caps ForceTTL", ex(200), httpcache.Policy{ForceTTL: time.Hour, MaxTTL: time.Minute}, stored(time.Minute)},
		{"MaxTTL caps the heuristic", ex(200, "Last-Modified", lm(10*time.Hour)),
			httpcache.Policy{HeuristicFraction: 0.1, MaxTTL: time.Minute}, stored(time.Minute)},
		{"MaxTTL caps Expires", ex(200, "Expires", date(t0.Add(time.Hour))), httpcache.Policy{MaxTTL: time.Minute},
			stored(time.Minute)},
		{"MaxTTL does not raise a shorter lifetime", ex(200, "Cache-Control", "max-age=5"), httpcache.Policy{MaxTTL: time.Minute},
			stored(sec(5))},

		{"must-revalidate sets MustRevalidate", ex(200, "Cache-Control", "max-age=60, must-revalidate"), httpcache.Policy{},
			mr(sec(60))},
		{"proxy-revalidate sets MustRevalidate", ex(200, "Cache-Control", "max-age=60, proxy-revalidate"), httpcache.Policy{},
			mr(sec(60))},
		{"must-revalidate survives ForceTTL", ex(200, "Cache-Control", "must-revalidate"), httpcache.Policy{ForceTTL: time.Minute},
			mr(time.Minute)},
	})
}

// RFC 5861 windows: the origin's directive, else the Policy default.
func TestDecideStaleWindows(t *testing.T) {
	def := httpcache.Policy{StaleWhileRevalidate: time.Minute, StaleIfError: time.Hour}
	win := func(l, swr, sie time.Duration) httpcache.Decision {
		return httpcache.Decision{Store: true, Lifetime: l, StaleWhileRevalidate: swr, StaleIfError: sie}
	}
	runDecide(t, []decideCase{
		{"the origin's windows are used", ex(200, "Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=300"),
			httpcache.Policy{}, win(sec(60), sec(30), sec(300))},
		{"the origin's windows win over the Policy defaults",
			ex(200, "Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=300"), def, win(sec(60), sec(30), sec(300))},
		{"an origin window of 0 wins over the Policy default", ex(200, "Cache-Control", "max-age=60, stale-while-revalidate=0"),
			def, win(sec(60), 0, time.Hour)},
		{"the Policy defaults fill in missing windows", ex(200, "Cache-Control", "max-age=60"), def,
			win(sec(60), time.Minute, time.Hour)},
		{"the Policy defaults apply to a forced lifetime", ex(200), httpcache.Policy{ForceTTL: time.Second, StaleIfError: time.Hour},
			win(time.Second, 0, time.Hour)},
		{"the Policy defaults apply to a heuristic lifetime", ex(200, "Last-Modified", date(t0.Add(-10*time.Hour))),
			httpcache.Policy{HeuristicFraction: 0.1, StaleWhileRevalidate: time.Minute}, win(time.Hour, time.Minute, 0)},
		{"the Policy defaults do not apply without a freshness source", ex(200, "ETag", `"v"`), def, win(0, 0, 0)},
		{"the origin's windows apply without a freshness source",
			ex(200, "ETag", `"v"`, "Cache-Control", "stale-if-error=300"), def, win(0, 0, sec(300))},
		{"an invalid origin window falls back to the Policy default",
			ex(200, "Cache-Control", "max-age=60, stale-if-error=-1"), def, win(sec(60), time.Minute, time.Hour)},
		{"negative Policy windows count as 0", ex(200, "Cache-Control", "max-age=60"),
			httpcache.Policy{StaleWhileRevalidate: -time.Minute, StaleIfError: -time.Hour}, win(sec(60), 0, 0)},
		{"must-revalidate zeroes the windows",
			ex(200, "Cache-Control", "max-age=60, must-revalidate, stale-while-revalidate=30, stale-if-error=30"), def,
			httpcache.Decision{Store: true, Lifetime: sec(60), MustRevalidate: true}},
		{"proxy-revalidate zeroes the windows", ex(200, "Cache-Control", "max-age=60, proxy-revalidate"), def,
			httpcache.Decision{Store: true, Lifetime: sec(60), MustRevalidate: true}},
		{"s-maxage zeroes the windows", ex(200, "Cache-Control", "s-maxage=60, stale-if-error=30"), def,
			httpcache.Decision{Store: true, Lifetime: sec(60), MustRevalidate: true}},
		{"no-cache zeroes the windows", ex(200, "Cache-Control", "no-cache, max-age=60, stale-if-error=30", "ETag", `"v"`), def,
			httpcache.Decision{Store: true, Lifetime: sec(60), NoCache: true}},
		{"windows alone do not make must-revalidate storable without a validator",
			ex(200, "Cache-Control", "max-age=0, must-revalidate"), def, notStored(reasonStale)},
	})
}

// RFC 9111 §4.2.4: the tier's window for an unreachable origin.
func TestDecideStaleIfUnreachable(t *testing.T) {
	siu := httpcache.Policy{StaleIfUnreachable: 10 * time.Minute}
	win := func(l time.Duration) httpcache.Decision {
		return httpcache.Decision{Store: true, Lifetime: l, StaleIfUnreachable: 10 * time.Minute}
	}
	runDecide(t, []decideCase{
		{"the window applies to a response with max-age", ex(200, "Cache-Control", "max-age=2"), siu, win(sec(2))},
		{"the window applies to a response without a freshness source", ex(200, "ETag", `"v"`), siu, win(0)},
		{"the window applies to a response stored already stale", ex(200, "Expires", "0", "Last-Modified", date(t0)), siu, win(0)},
		{"the window applies beside the origin's stale-if-error",
			ex(200, "Cache-Control", "max-age=2, stale-if-error=60"), siu,
			httpcache.Decision{Store: true, Lifetime: sec(2), StaleIfError: sec(60), StaleIfUnreachable: 10 * time.Minute}},
		{"must-revalidate zeroes the window", ex(200, "Cache-Control", "max-age=2, must-revalidate"), siu,
			httpcache.Decision{Store: true, Lifetime: sec(2), MustRevalidate: true}},
		{"proxy-revalidate zeroes the window", ex(200, "Cache-Control", "max-age=2, proxy-revalidate"), siu,
			httpcache.Decision{Store: true, Lifetime: sec(2), MustRevalidate: true}},
		{"s-maxage zeroes the window", ex(200, "Cache-Control", "s-maxage=2"), siu,
			httpcache.Decision{Store: true, Lifetime: sec(2), MustRevalidate: true}},
		{"no-cache zeroes the window", ex(200, "Cache-Control", "no-cache, max-age=2", "ETag", `"v"`), siu,
			httpcache.Decision{Store: true, Lifetime: sec(2), NoCache: true}},
		{"the window does not make an already stale response without a validator storable",
			ex(200, "Cache-Control", "max-age=0"), siu, notStored(reasonStale)},
		{"a negative window counts as 0", ex(200, "Cache-Control", "max-age=2"),
			httpcache.Policy{StaleIfUnreachable: -time.Minute}, stored(sec(2))},
		{"a huge window clamps to 2^31 seconds", ex(200, "Cache-Control", "max-age=2"),
			httpcache.Policy{StaleIfUnreachable: time.Duration(math.MaxInt64)},
			httpcache.Decision{Store: true, Lifetime: sec(2), StaleIfUnreachable: maxDelta}},
	})
}

// RFC 9111 §4.2.3: corrected_initial_age.
func TestDecideInitialAge(t *testing.T) {
	age := func(req, resp time.Time, kv ...string) httpcache.Exchange {
		x := ex(200, append([]string{"Cache-Control", "max-age=3600"}, kv...)...)
		x.RequestTime, x.ResponseTime = req, resp
		return x
	}
	tests := []struct {
		name string
		x    httpcache.Exchange
		want time.Duration
	}{
		{"no Age, no delay and a current Date give 0", age(t0, t0), 0},
		{"Age is added to the response delay", age(t0.Add(-2*time.Second), t0, "Age", "10"), sec(12)},
		{"the response delay alone counts", age(t0.Add(-3*time.Second), t0), sec(3)},
		{"the apparent age wins when larger", age(t0.Add(-time.Second), t0, "Date", date(t0.Add(-30*time.Second)), "Age", "5"), sec(30)},
		{"the corrected Age wins when larger", age(t0.Add(-time.Second), t0, "Date", date(t0.Add(-5*time.Second)), "Age", "20"), sec(21)},
		{"a Date in the future gives no negative age", age(t0, t0, "Date", date(t0.Add(time.Hour))), 0},
		{"a Date in the future does not hide Age", age(t0, t0, "Date", date(t0.Add(time.Hour)), "Age", "7"), sec(7)},
		{"a missing Date gives no apparent age", age(t0, t0, "Date", "-", "Age", "4"), sec(4)},
		{"an invalid Date gives no apparent age", age(t0, t0, "Date", "yesterday"), 0},
		{"an invalid Age is ignored", age(t0, t0, "Age", "-100"), 0},
		{"a request time after the response time gives no delay", age(t0.Add(time.Hour), t0), 0},
		{"a zero request time gives no delay", age(time.Time{}, t0), 0},
		{"an absurdly old Date clamps to 2^31 seconds", age(t0, t0, "Date", "Mon, 01 Jan 1900 00:00:00 GMT"), maxDelta},
		{"a huge Age clamps to 2^31 seconds", age(t0.Add(-time.Hour), t0, "Age", "2147483648"), maxDelta},
		{"a zero response time gives no apparent age", age(time.Time{}, time.Time{}), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := httpcache.Decide(tt.x, httpcache.Policy{})
			if !got.Store || got.InitialAge != tt.want {
				t.Errorf("InitialAge = %v (store %v, %q), want %v", got.InitialAge, got.Store, got.Reason, tt.want)
			}
		})
	}
}

// CorrectedInitialAge is the same whether or not the response is stored.
func TestCorrectedInitialAge(t *testing.T) {
	tests := []struct {
		name string
		x    httpcache.Exchange
		want time.Duration
	}{
		{"the origin's Age plus the response delay", func() httpcache.Exchange {
			x := ex(200, "Age", "10")
			x.RequestTime = t0.Add(-2 * time.Second)
			return x
		}(), sec(12)},
		{"an unstored response is measured too", func() httpcache.Exchange {
			x := ex(200, "Cache-Control", "no-store", "Age", "30")
			x.RequestTime = t0.Add(-time.Second)
			return x
		}(), sec(31)},
		{"the apparent age from Date counts", ex(503, "Date", date(t0.Add(-20*time.Second))), sec(20)},
		{"without Age, delay or an old Date the age is 0", ex(200), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.CorrectedInitialAge(tt.x); got != tt.want {
				t.Errorf("CorrectedInitialAge = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecideStrip(t *testing.T) {
	tests := []struct {
		name string
		x    httpcache.Exchange
		p    httpcache.Policy
		want []string
	}{
		{"a stored response always strips Set-Cookie", ex(200, "Cache-Control", "max-age=5"), httpcache.Policy{},
			[]string{"Set-Cookie"}},
		{"private and no-cache fields are stripped in order without duplicates",
			ex(200, "Cache-Control", `private="set-cookie, x-a", no-cache="Set-Cookie, X-B", max-age=5`, "Set-Cookie", "a=b"),
			httpcache.Policy{}, []string{"Set-Cookie", "X-A", "X-B"}},
		{"fields named by no-cache are stripped even under ForceTTL", ex(200, "Cache-Control", `no-cache="X-A"`),
			httpcache.Policy{ForceTTL: time.Minute}, []string{"X-A", "Set-Cookie"}},
		{"a response that is not stored strips nothing", ex(200, "Cache-Control", "no-store"), httpcache.Policy{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.Decide(tt.x, tt.p).Strip; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Strip = %q, want %q", got, tt.want)
			}
		})
	}
}

// Policy.StatusTTLs: lifetimes by status for responses without explicit
// freshness (nginx's proxy_cache_valid), and where they stand among the
// other lifetimes.
func TestDecideStatusLifetimes(t *testing.T) {
	byStatus := func(kv ...any) httpcache.Policy {
		p := httpcache.Policy{StatusTTLs: map[int]time.Duration{}}
		for i := 0; i+1 < len(kv); i += 2 {
			p.StatusTTLs[kv[i].(int)] = kv[i+1].(time.Duration)
		}
		return p
	}
	with := func(p httpcache.Policy, f func(*httpcache.Policy)) httpcache.Policy { f(&p); return p }
	lm := date(t0.Add(-10 * time.Hour))
	runDecide(t, []decideCase{
		{"a status lifetime applies to a 301 without freshness", ex(301), byStatus(301, time.Hour), stored(time.Hour)},
		{"a status lifetime makes a 302 storable", ex(302), byStatus(302, time.Hour), stored(time.Hour)},
		{"a status lifetime makes a 307 storable", ex(307), byStatus(302, time.Minute, 307, time.Hour), stored(time.Hour)},
		{"a 302 without a status lifetime is not stored", ex(302), byStatus(301, time.Hour), notStored(reasonNotByDefault)},
		{"a status lifetime applies only to its status", ex(200, "ETag", `"v"`), byStatus(301, time.Hour), stored(0)},
		{"the origin's max-age wins over a status lifetime", ex(301, "Cache-Control", "max-age=60"), byStatus(301, time.Hour), stored(sec(60))},
		{"the origin's Expires wins over a status lifetime", ex(200, "Expires", date(t0.Add(90*time.Second))), byStatus(200, time.Hour), stored(sec(90))},
		{"a rule's ttl wins over a status lifetime", ex(301),
			with(byStatus(301, time.Hour), func(p *httpcache.Policy) { p.ForceTTL = 5 * time.Minute }), stored(5 * time.Minute)},
		{"a status lifetime wins over NegativeTTL for its status", ex(404),
			with(byStatus(404, time.Minute), func(p *httpcache.Policy) { p.NegativeTTL = 10 * time.Second }), stored(time.Minute)},
		{"NegativeTTL still covers a 410 that no status lifetime names", ex(410),
			with(byStatus(404, time.Minute), func(p *httpcache.Policy) { p.NegativeTTL = 10 * time.Second }), stored(sec(10))},
		{"a status lifetime wins over FallbackTTL and the heuristic", ex(200, "Last-Modified", lm),
			with(byStatus(200, 5*time.Minute), func(p *httpcache.Policy) { p.FallbackTTL, p.HeuristicFraction = time.Hour, 0.1 }), stored(5 * time.Minute)},
		{"maxTTL caps a status lifetime", ex(301),
			with(byStatus(301, time.Hour), func(p *httpcache.Policy) { p.MaxTTL = time.Minute }), stored(time.Minute)},
		{"a status lifetime does not apply to a request with a Cookie", withReq(ex(301), "Cookie", "s=1"),
			byStatus(301, time.Hour), notStored(reasonCredentials)},
		{"a status lifetime applies to a request with a Cookie when the rule opts in", withReq(ex(302), "Cookie", "s=1"),
			with(byStatus(302, time.Hour), func(p *httpcache.Policy) { p.ForceTTLWithCredentials = true }), stored(time.Hour)},
		{"no-store still wins over a status lifetime", ex(301, "Cache-Control", "no-store"), byStatus(301, time.Hour),
			notStored("no-store on the response prevents storing")},
		{"private still wins over a status lifetime", ex(302, "Cache-Control", "private"), byStatus(302, time.Hour),
			notStored("private prevents storing in a shared cache")},
	})
}
