package tierconfig

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration. JSON/YAML: a Go duration string ("30s",
// "1h30m", "0"), which may also count days, weeks and years as Varnish and
// nginx do ("1d", "7d", "2w", "1y", "1d12h": d is 24h, w 7d, y 365d); the
// number 0 is accepted too since YAML turns a bare 0 into one. It
// marshals to time.Duration.String() ("24h0m0s" for "1d"). Negative
// values parse: Validate refuses them, naming the field.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String is time.Duration's form ("1h30m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// DurationSyntax says what a duration may be, for error messages.
const DurationSyntax = `a duration such as "30s", "1h30m" or "7d" (units ns, us, ms, s, m, h, d = 24h, w = 7d, y = 365d)`

// ParseDuration parses a Go duration string whose components may also be
// counted in days (d), weeks (w) and years (y).
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(inHours(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want %s", s, DurationSyntax)
	}
	return Duration(v), nil
}

// hoursPer is the length in hours of the units time.ParseDuration does
// not know.
var hoursPer = map[string]float64{"d": 24, "w": 7 * 24, "y": 365 * 24}

// inHours rewrites each day, week and year component of s ("1.5d") in
// hours ("36h"), leaving everything else as it is for time.ParseDuration
// to parse or refuse.
func inHours(s string) string {
	if !strings.ContainsAny(s, "dwy") {
		return s
	}
	isNum := func(c byte) bool { return c == '.' || '0' <= c && c <= '9' }
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && isNum(s[j]) {
			j++
		}
		k := j
		for k < len(s) && !isNum(s[k]) {
			k++
		}
		hours, ok := hoursPer[s[j:k]]
		n, err := strconv.ParseFloat(s[i:j], 64)
		if !ok || j == i || err != nil {
			b.WriteString(s[i:k])
		} else {
			b.WriteString(strconv.FormatFloat(n*hours, 'f', -1, 64))
			b.WriteByte('h')
		}
		i = k
	}
	return b.String()
}

// MarshalJSON encodes d as its time.Duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, d.String()), nil
}

// UnmarshalJSON accepts a duration string or the number 0; null leaves d
// unchanged.
func (d *Duration) UnmarshalJSON(data []byte) error {
	text, err := scalarText(data, "duration")
	if err != nil || text == nil {
		return err
	}
	isString := bytes.TrimSpace(data)[0] == '"'
	v, err := durationFromJSON(*text, isString)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// durationFromJSON interprets the text of a JSON string (isString) or
// number token.
func durationFromJSON(text string, isString bool) (Duration, error) {
	if isString {
		return ParseDuration(text)
	}
	if f, err := strconv.ParseFloat(text, 64); err == nil && f == 0 {
		return 0, nil
	}
	return 0, fmt.Errorf("invalid duration %s: a number needs a unit, such as \"%ss\"", text, text)
}
