package tierconfig

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// Duration is a time.Duration. JSON/YAML: a Go duration string ("30s",
// "1h30m", "0"); the number 0 is accepted too since YAML turns a bare 0
// into one. It marshals to time.Duration.String(). Negative values parse:
// Validate refuses them, naming the field.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String is time.Duration's form ("1h30m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration parses a Go duration string.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as \"30s\" or \"1h30m\" (units ns, us, ms, s, m, h)", s)
	}
	return Duration(v), nil
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
