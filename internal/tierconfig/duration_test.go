package tierconfig

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationUnmarshalJSON(t *testing.T) {
	const syntax = `want a duration such as "30s", "1h30m" or "7d" (units ns, us, ms, s, m, h, d = 24h, w = 7d, y = 365d)`
	tests := map[string]struct {
		in      string
		want    Duration
		wantErr string
	}{
		"seconds":                     {in: `"30s"`, want: Duration(30 * time.Second)},
		"hours and minutes":           {in: `"1h30m"`, want: Duration(90 * time.Minute)},
		"milliseconds":                {in: `"50ms"`, want: Duration(50 * time.Millisecond)},
		"a string zero needs no unit": {in: `"0"`, want: 0},
		"a number zero is accepted (bare YAML 0)":            {in: `0`, want: 0},
		"negative parses; Validate refuses it":               {in: `"-5s"`, want: Duration(-5 * time.Second)},
		"null leaves the value unchanged":                    {in: `null`, want: 7},
		"a day, as Varnish and nginx write it":               {in: `"1d"`, want: Duration(24 * time.Hour)},
		"a week of days":                                     {in: `"7d"`, want: Duration(7 * 24 * time.Hour)},
		"weeks":                                              {in: `"2w"`, want: Duration(14 * 24 * time.Hour)},
		"a year is 365 days":                                 {in: `"1y"`, want: Duration(365 * 24 * time.Hour)},
		"days mixed with Go units":                           {in: `"1d12h30m"`, want: Duration(36*time.Hour + 30*time.Minute)},
		"a fraction of a day":                                {in: `"1.5d"`, want: Duration(36 * time.Hour)},
		"a negative day parses; Validate refuses it":         {in: `"-1d"`, want: Duration(-24 * time.Hour)},
		"a unit without a number is refused":                 {in: `"d"`, wantErr: `invalid duration "d": ` + syntax},
		"an unknown unit is refused":                         {in: `"1mo"`, wantErr: `invalid duration "1mo": ` + syntax},
		"a day count past int64 is refused":                  {in: `"999999999d"`, wantErr: `invalid duration "999999999d": ` + syntax},
		"a space is refused":                                 {in: `"1 d"`, wantErr: `invalid duration "1 d": ` + syntax},
		"a unitless string is refused":                       {in: `"30"`, wantErr: `invalid duration "30": ` + syntax},
		"an empty string is refused":                         {in: `""`, wantErr: `invalid duration "": ` + syntax},
		"a non-zero number needs a unit":                     {in: `30`, wantErr: `invalid duration 30: a number needs a unit, such as "30s"`},
		"a boolean is refused":                               {in: `false`, wantErr: `invalid duration false: must be a string or a number`},
		"a duration over a year parses; Validate refuses it": {in: `"300000h"`, want: Duration(300000 * time.Hour)},
		"a duration past int64 is refused":                   {in: `"9999999999h"`, wantErr: `invalid duration "9999999999h": ` + syntax},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := Duration(7)
			err := json.Unmarshal([]byte(tt.in), &d)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Unmarshal(%s) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || d != tt.want {
				t.Fatalf("Unmarshal(%s) = %v, %v; want %v", tt.in, d, err, tt.want)
			}
		})
	}
}

func TestDurationMarshalJSON(t *testing.T) {
	tests := map[string]struct {
		in   Duration
		want string
	}{
		"zero":                                {0, `"0s"`},
		"ninety minutes is canonical 1h30m0s": {Duration(90 * time.Minute), `"1h30m0s"`},
		"sub-second values keep their unit":   {Duration(50 * time.Millisecond), `"50ms"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			if err != nil || string(b) != tt.want {
				t.Fatalf("Marshal(%v) = %s, %v; want %s", time.Duration(tt.in), b, err, tt.want)
			}
			var back Duration
			if err := json.Unmarshal(b, &back); err != nil || back != tt.in {
				t.Fatalf("round trip of %s = %v, %v", b, back, err)
			}
			if tt.in.String() != tt.want[1:len(tt.want)-1] {
				t.Fatalf("String() = %q", tt.in.String())
			}
		})
	}
}
