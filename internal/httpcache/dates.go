package httpcache

import (
	"net/http"
	"strings"
	"time"
)

// ParseHTTPDate parses an HTTP-date in any of the three formats RFC 9110
// §5.6.7 requires a recipient to accept. ok is false for anything else.
//
//	IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT
//	rfc850-date  Sunday, 06-Nov-94 08:49:37 GMT
//	asctime-date Sun Nov  6 08:49:37 1994
//
// Names and "GMT" are matched case-insensitively and surrounding whitespace
// is ignored, but the shape is strict: any other zone, a missing field or
// an impossible date (31 Feb, 25:00) is rejected. The day name is checked
// to be a day name, not to agree with the date. A two-digit rfc850 year
// below 70 is 20xx, else 19xx (there is no clock here to apply the
// "50 years in the future" rule against). It does not allocate.
func ParseHTTPDate(s string) (t time.Time, ok bool) {
	s = trimOWS(s)
	switch {
	case len(s) == 29 && s[3] == ',':
		return parseIMFFixdate(s)
	case len(s) == 24 && s[3] == ' ':
		return parseAsctime(s)
	default:
		return parseRFC850(s)
	}
}

// parseIMFFixdate parses "Sun, 06 Nov 1994 08:49:37 GMT".
func parseIMFFixdate(s string) (time.Time, bool) {
	if !isShortDay(s[0:3]) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[25] != ' ' ||
		!strings.EqualFold(s[26:29], "GMT") {
		return time.Time{}, false
	}
	day, ok1 := digits(s[5:7])
	month, ok2 := monthOf(s[8:11])
	year, ok3 := digits(s[12:16])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, false
	}
	return build(year, month, day, s[17:25])
}

// parseRFC850 parses "Sunday, 06-Nov-94 08:49:37 GMT".
func parseRFC850(s string) (time.Time, bool) {
	c := strings.IndexByte(s, ',')
	if c < 0 || !isLongDay(s[:c]) {
		return time.Time{}, false
	}
	r := s[c:] // ", 06-Nov-94 08:49:37 GMT"
	if len(r) != 24 || r[1] != ' ' || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r[20] != ' ' ||
		!strings.EqualFold(r[21:24], "GMT") {
		return time.Time{}, false
	}
	day, ok1 := digits(r[2:4])
	month, ok2 := monthOf(r[5:8])
	yy, ok3 := digits(r[9:11])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, false
	}
	year := 1900 + yy
	if yy < 70 {
		year = 2000 + yy
	}
	return build(year, month, day, r[12:20])
}

// parseAsctime parses "Sun Nov  6 08:49:37 1994" (or "Nov 06").
func parseAsctime(s string) (time.Time, bool) {
	if !isShortDay(s[0:3]) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
		return time.Time{}, false
	}
	month, ok1 := monthOf(s[4:7])
	var day int
	var ok2 bool
	if s[8] == ' ' {
		day, ok2 = digits(s[9:10])
	} else {
		day, ok2 = digits(s[8:10])
	}
	year, ok3 := digits(s[20:24])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, false
	}
	return build(year, month, day, s[11:19])
}

// build checks the ranges and makes the UTC time; clock is "08:49:37".
// Second 60 (a leap second) is accepted and rolls into the next minute.
func build(year int, month time.Month, day int, clock string) (time.Time, bool) {
	if clock[2] != ':' || clock[5] != ':' {
		return time.Time{}, false
	}
	hh, ok1 := digits(clock[0:2])
	mm, ok2 := digits(clock[3:5])
	ss, ok3 := digits(clock[6:8])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 60 || day < 1 || day > daysIn(month, year) {
		return time.Time{}, false
	}
	return time.Date(year, month, day, hh, mm, ss, 0, time.UTC), true
}

func daysIn(m time.Month, year int) int {
	switch m {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// digits parses a short run of ASCII digits.
func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, len(s) > 0
}

// The name tables are constants (not arrays) so the package keeps no
// mutable state.
const (
	monthNames = "JanFebMarAprMayJunJulAugSepOctNovDec"
	dayNames   = "Monday,Tuesday,Wednesday,Thursday,Friday,Saturday,Sunday"
)

func monthOf(s string) (time.Month, bool) {
	if len(s) != 3 {
		return 0, false
	}
	for i := 0; i < 12; i++ {
		if strings.EqualFold(s, monthNames[3*i:3*i+3]) {
			return time.Month(i + 1), true
		}
	}
	return 0, false
}

func isShortDay(s string) bool {
	if len(s) != 3 {
		return false
	}
	for rest := dayNames; rest != ""; {
		var d string
		d, rest = cutElem(rest)
		if strings.EqualFold(s, d[:3]) {
			return true
		}
	}
	return false
}

func isLongDay(s string) bool {
	for rest := dayNames; rest != ""; {
		var d string
		d, rest = cutElem(rest)
		if strings.EqualFold(s, d) {
			return true
		}
	}
	return false
}

// AddDate gives a response that arrived at received without a Date field
// one (RFC 9110 §6.6.1: a recipient with a clock that caches or forwards
// such a response must add the time it was received). It reports whether
// it added one. A Date that is present, even invalid, is left alone.
func AddDate(h http.Header, received time.Time) bool {
	if len(h["Date"]) > 0 {
		return false
	}
	h["Date"] = []string{received.UTC().Format(http.TimeFormat)}
	return true
}
