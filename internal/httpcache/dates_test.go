package httpcache_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestParseHTTPDate(t *testing.T) {
	nov6 := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	tests := []struct {
		name string
		in   string
		want time.Time // zero: not ok
	}{
		{"IMF-fixdate is accepted", "Sun, 06 Nov 1994 08:49:37 GMT", nov6},
		{"rfc850-date is accepted", "Sunday, 06-Nov-94 08:49:37 GMT", nov6},
		{"asctime-date is accepted", "Sun Nov  6 08:49:37 1994", nov6},
		{"asctime-date with a two-digit day is accepted", "Sun Nov 06 08:49:37 1994", nov6},
		{"surrounding whitespace is ignored", " \tSun, 06 Nov 1994 08:49:37 GMT ", nov6},
		{"names are matched case-insensitively", "SUN, 06 nov 1994 08:49:37 gmt", nov6},
		{"the day name need not agree with the date", "Mon, 06 Nov 1994 08:49:37 GMT", nov6},
		{"an rfc850 year below 70 is in the 2000s", "Thursday, 01-Jan-26 00:00:00 GMT",
			time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"an rfc850 year of 70 or more is in the 1900s", "Thursday, 01-Jan-70 00:00:00 GMT",
			time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"29 February of a leap year is valid", "Thu, 29 Feb 2024 00:00:00 GMT", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"29 February 2000 is valid", "Tue, 29 Feb 2000 00:00:00 GMT", time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"a leap second rolls into the next minute", "Sat, 31 Dec 2016 23:59:60 GMT", time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"year 9999 is valid", "Fri, 31 Dec 9999 23:59:59 GMT", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)},

		{"the empty string is rejected", "", time.Time{}},
		{"a number is rejected", "0", time.Time{}},
		{"-1 is rejected", "-1", time.Time{}},
		{"junk is rejected", "not a date at all, really not", time.Time{}},
		{"a zone other than GMT is rejected", "Sun, 06 Nov 1994 08:49:37 UTC", time.Time{}},
		{"a numeric zone is rejected", "Sun, 06 Nov 1994 08:49:37 +0000", time.Time{}},
		{"RFC 3339 is rejected", "1994-11-06T08:49:37Z", time.Time{}},
		{"a single-digit IMF day is rejected", "Sun, 6 Nov 1994 08:49:37 GMT", time.Time{}},
		{"an unknown month is rejected", "Sun, 06 Noe 1994 08:49:37 GMT", time.Time{}},
		{"an unknown day name is rejected", "Sno, 06 Nov 1994 08:49:37 GMT", time.Time{}},
		{"a short day name in rfc850 is rejected", "Sun, 06-Nov-94 08:49:37 GMT", time.Time{}},
		{"a four-digit year in rfc850 is rejected", "Sunday, 06-Nov-1994 08:49:37 GMT", time.Time{}},
		{"hour 24 is rejected", "Sun, 06 Nov 1994 24:00:00 GMT", time.Time{}},
		{"minute 60 is rejected", "Sun, 06 Nov 1994 08:60:00 GMT", time.Time{}},
		{"second 61 is rejected", "Sun, 06 Nov 1994 08:49:61 GMT", time.Time{}},
		{"31 April is rejected", "Sun, 31 Apr 1994 08:49:37 GMT", time.Time{}},
		{"29 February of a common year is rejected", "Sun, 29 Feb 2023 08:49:37 GMT", time.Time{}},
		{"29 February 1900 is rejected", "Thu, 29 Feb 1900 00:00:00 GMT", time.Time{}},
		{"day 0 is rejected", "Sun, 00 Nov 1994 08:49:37 GMT", time.Time{}},
		{"signs in numbers are rejected", "Sun, +6 Nov 1994 08:49:37 GMT", time.Time{}},
		{"a wrong separator is rejected", "Sun, 06 Nov 1994 08-49-37 GMT", time.Time{}},
		{"a truncated date is rejected", "Sun, 06 Nov 1994 08:49:37", time.Time{}},
		{"asctime with a trailing zone is rejected", "Sun Nov  6 08:49:37 1994 GMT", time.Time{}},
		{"asctime with a bad day pad is rejected", "Sun Nov 6  08:49:37 1994", time.Time{}},
		{"a lone comma is rejected", ",", time.Time{}},
		{"non-ASCII bytes are rejected", "Sun, 06 Nov 1994 08:49:37 G\xffT", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := httpcache.ParseHTTPDate(tt.in)
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Errorf("ParseHTTPDate(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, !tt.want.IsZero())
			}
			if ok && got.Location() != time.UTC {
				t.Errorf("ParseHTTPDate(%q) location %v, want UTC", tt.in, got.Location())
			}
		})
	}
}

func TestParseHTTPDateAgreesWithNetHTTP(t *testing.T) {
	// Every date net/http formats must parse back to the same instant.
	for _, tm := range []time.Time{t0, time.Unix(0, 0), time.Unix(1<<31, 0), time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC)} {
		s := tm.UTC().Format(http.TimeFormat)
		got, ok := httpcache.ParseHTTPDate(s)
		want, err := http.ParseTime(s)
		if !ok || err != nil || !got.Equal(want) {
			t.Errorf("%q: got %v %v, net/http %v %v", s, got, ok, want, err)
		}
	}
}

func TestAgeValue(t *testing.T) {
	tests := []struct {
		name string
		h    httpcache.Header
		want time.Duration
	}{
		{"no Age is 0", hdr(), 0},
		{"a plain Age is read", hdr("Age", "60"), sec(60)},
		{"whitespace is trimmed", hdr("Age", " 60 "), sec(60)},
		{"the first member of a list is used", hdr("Age", "60, 120"), sec(60)},
		{"the first field line is used", hdr("Age", "7", "Age", "8"), sec(7)},
		{"a negative Age is ignored", hdr("Age", "-5"), 0},
		{"a fractional Age is ignored", hdr("Age", "1.5"), 0},
		{"a non-numeric Age is ignored", hdr("Age", "old"), 0},
		{"an empty Age is ignored", hdr("Age", ""), 0},
		{"an overflowing Age clamps to 2^31 seconds", hdr("Age", "999999999999999999999999999999"), maxDelta},
		{"a nil Header is 0", nil, 0},
		{"another Header kind is read", entryHeader{{"age", "9"}}, sec(9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.AgeValue(tt.h); got != tt.want {
				t.Errorf("AgeValue = %v, want %v", got, tt.want)
			}
		})
	}
}

// FreshUntil is the instant AgeAt reaches the lifetime, whatever the
// initial age; a negative initial age counts as none, as in AgeAt.
func TestFreshUntilIsWhereTheAgeReachesTheLifetime(t *testing.T) {
	received := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, initial := range []time.Duration{0, 30 * time.Second, -5 * time.Second} {
		until := httpcache.FreshUntil(received, time.Minute, initial)
		if got := httpcache.AgeAt(initial, received, until); got != time.Minute {
			t.Errorf("initial age %v: age at FreshUntil (%v) is %v, want the lifetime 1m0s", initial, until, got)
		}
	}
}
