package tierconfig

import (
	"encoding/json"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Size
		wantErr string
	}{
		"plain bytes are bytes": {in: "1500", want: 1500},
		"zero is allowed":       {in: "0", want: 0},
		"Ki is 1024":            {in: "64Ki", want: 64 << 10},
		"Mi is 1024 Ki":         {in: "512Mi", want: 512 << 20},
		"Gi is 1024 Mi":         {in: "1Gi", want: 1 << 30},
		"Ti is 1024 Gi":         {in: "2Ti", want: 2 << 40},
		"k is 1000":             {in: "3k", want: 3000},
		"M is a million":        {in: "1M", want: 1_000_000},
		"G is a billion":        {in: "5G", want: 5_000_000_000},
		"T is a trillion":       {in: "1T", want: 1_000_000_000_000},
		"a fraction that makes whole bytes is ok": {in: "1.5Ki", want: 1536},
		"a decimal fraction of a decimal suffix":  {in: "0.25M", want: 250_000},
		"trailing zeros after the point are fine": {in: "2.000", want: 2},
		"leading zeros are fine":                  {in: "007Ki", want: 7 << 10},
		"the largest int64 is accepted":           {in: "9223372036854775807", want: 1<<63 - 1},
		"empty is refused":                        {in: "", wantErr: `invalid size "": empty`},
		"a negative size is refused":              {in: "-1Mi", wantErr: `invalid size "-1Mi": must not be negative`},
		"a fraction of a byte is refused":         {in: "0.5", wantErr: `invalid size "0.5": not a whole number of bytes`},
		"a fraction of a Ki that is not whole":    {in: "0.3Ki", wantErr: `invalid size "0.3Ki": not a whole number of bytes`},
		"overflow is refused":                     {in: "8388608Ti", wantErr: `invalid size "8388608Ti": too large (at most 9223372036854775807 bytes)`},
		"one more than int64 is refused":          {in: "9223372036854775808", wantErr: `invalid size "9223372036854775808": too large (at most 9223372036854775807 bytes)`},
		"Pi is not a cache size":                  {in: "1Pi", wantErr: `invalid size "1Pi": unknown suffix "Pi" (want Ki, Mi, Gi, Ti, k, M, G or T)`},
		"MB is not a Kubernetes suffix":           {in: "10MB", wantErr: `invalid size "10MB": unknown suffix "MB" (want Ki, Mi, Gi, Ti, k, M, G or T)`},
		"a capital K is not kilo":                 {in: "10K", wantErr: `invalid size "10K": unknown suffix "K" (want Ki, Mi, Gi, Ti, k, M, G or T)`},
		"milli makes no sense for bytes":          {in: "100m", wantErr: `invalid size "100m": unknown suffix "m" (want Ki, Mi, Gi, Ti, k, M, G or T)`},
		"an exponent is not accepted":             {in: "1e6", wantErr: `invalid size "1e6": want a number of bytes with an optional suffix Ki, Mi, Gi, Ti, k, M, G or T, such as 512Mi`},
		"a suffix alone is not a number":          {in: "Mi", wantErr: `invalid size "Mi": want a number of bytes with an optional suffix Ki, Mi, Gi, Ti, k, M, G or T, such as 512Mi`},
		"a point without digits after it":         {in: "1.Mi", wantErr: `invalid size "1.Mi": want a number of bytes with an optional suffix Ki, Mi, Gi, Ti, k, M, G or T, such as 512Mi`},
		"a space before the suffix is refused":    {in: "1 Mi", wantErr: `invalid size "1 Mi": want a number of bytes with an optional suffix Ki, Mi, Gi, Ti, k, M, G or T, such as 512Mi`},
		"a plus sign is refused":                  {in: "+1Mi", wantErr: `invalid size "+1Mi": want a number of bytes with an optional suffix Ki, Mi, Gi, Ti, k, M, G or T, such as 512Mi`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseSize(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	tests := map[string]struct {
		in   Size
		want string
	}{
		"zero is 0":       {0, "0"},
		"whole Mi use Mi": {256 * Mi, "256Mi"},
		"the largest exact binary suffix is used":    {1024 * Mi, "1Gi"},
		"a non-whole Mi falls back to Ki":            {1536 * Ki, "1536Ki"},
		"bytes that are no whole Ki stay plain":      {1500, "1500"},
		"decimal multiples are not decimal suffixes": {1_000_000, "1000000"},
		"Ti is the largest suffix":                   {4096 * Ti, "4096Ti"},
		"negative sizes print plain":                 {-1024, "-1024"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Fatalf("Size(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
			}
			b, err := json.Marshal(tt.in)
			if err != nil || string(b) != `"`+tt.want+`"` {
				t.Fatalf("json.Marshal(Size(%d)) = %s, %v", int64(tt.in), b, err)
			}
			if tt.in >= 0 {
				back, err := ParseSize(tt.want)
				if err != nil || back != tt.in {
					t.Fatalf("ParseSize(%q) = %d, %v; want it to round-trip", tt.want, back, err)
				}
			}
		})
	}
}

func TestSizeUnmarshalJSON(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Size
		wantErr string
	}{
		"a quantity string":               {in: `"512Mi"`, want: 512 * Mi},
		"a JSON number is bytes":          {in: `1048576`, want: Mi},
		"an escaped string is decoded":    {in: `"\u0031Ki"`, want: Ki},
		"null leaves the value unchanged": {in: `null`, want: 7},
		"a fractional number is refused":  {in: `1.5`, wantErr: `invalid size "1.5": not a whole number of bytes`},
		"a negative number is refused":    {in: `-5`, wantErr: `invalid size "-5": must not be negative`},
		"a boolean is refused":            {in: `true`, wantErr: `invalid size true: must be a string or a number`},
		"an object is refused":            {in: `{}`, wantErr: `invalid size {}: must be a string or a number`},
		"a bad suffix in a string":        {in: `"1Xi"`, wantErr: `invalid size "1Xi": unknown suffix "Xi" (want Ki, Mi, Gi, Ti, k, M, G or T)`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := Size(7)
			err := json.Unmarshal([]byte(tt.in), &s)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Unmarshal(%s) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || s != tt.want {
				t.Fatalf("Unmarshal(%s) = %d, %v; want %d", tt.in, s, err, tt.want)
			}
		})
	}
}
