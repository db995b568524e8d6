package operator

import (
	"encoding/base64"
	"testing"
	"time"
)

func TestJWTExpiry(t *testing.T) {
	jwt := func(payload string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2lnbmF0dXJl"
	}
	cases := map[string]struct {
		token string
		want  time.Time
		ok    bool
	}{
		"the exp claim is read":                      {jwt(`{"exp":1700000000,"sub":"x"}`), time.Unix(1700000000, 0), true},
		"a token without exp has no expiry":          {jwt(`{"sub":"x"}`), time.Time{}, false},
		"a payload that is not JSON is ignored":      {jwt(`not json`), time.Time{}, false},
		"a payload that is not base64 is ignored":    {"a.!!!.c", time.Time{}, false},
		"a token that is not three parts is ignored": {"opaque-token", time.Time{}, false},
		"a non-numeric exp is ignored":               {jwt(`{"exp":"soon"}`), time.Time{}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := jwtExpiry(tc.token)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("got %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
