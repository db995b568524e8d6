package httpcache

import (
	"testing"
	"time"
)

func TestAppendCacheStatus(t *testing.T) {
	tests := map[string]struct {
		name string
		s    CacheStatus
		want string
	}{
		"a hit carries its remaining freshness and the rule": {
			"tiercache", CacheStatus{Hit: true, TTL: 42 * time.Second, HasTTL: true, Detail: "static"},
			"tiercache; hit; ttl=42; detail=static",
		},
		"a stale hit has a negative ttl rounded down": {
			"tiercache", CacheStatus{Hit: true, TTL: -1500 * time.Millisecond, HasTTL: true},
			"tiercache; hit; ttl=-2",
		},
		"a fresh hit's fraction of a second rounds down": {
			"tiercache", CacheStatus{Hit: true, TTL: 1999 * time.Millisecond, HasTTL: true},
			"tiercache; hit; ttl=1",
		},
		"a stored miss says fwd and stored": {
			"tiercache", CacheStatus{Fwd: "uri-miss", Stored: true, Detail: "api"},
			"tiercache; fwd=uri-miss; stored; detail=api",
		},
		"a revalidation names the next hop's 304": {
			"tiercache", CacheStatus{Fwd: "stale", FwdStatus: 304, Stored: true},
			"tiercache; fwd=stale; fwd-status=304; stored",
		},
		"fwd-status is not sent without fwd": {
			"tiercache", CacheStatus{Hit: true, FwdStatus: 304},
			"tiercache; hit",
		},
		"a collapsed request says so": {
			"tiercache", CacheStatus{Fwd: "uri-miss", Collapsed: true},
			"tiercache; fwd=uri-miss; collapsed",
		},
		"a name that is no token is sent as a string": {
			"tier cache", CacheStatus{Fwd: "bypass"},
			`"tier cache"; fwd=bypass`,
		},
		"a detail starting with a digit is sent as a string": {
			"tiercache", CacheStatus{Fwd: "bypass", Detail: "1st-rule"},
			`tiercache; fwd=bypass; detail="1st-rule"`,
		},
		"the key is a string with quotes and backslashes escaped": {
			"tiercache", CacheStatus{Hit: true, Key: `GET example.com/a?q="x"\y`},
			`tiercache; hit; key="GET example.com/a?q=\"x\"\\y"`,
		},
		"bytes a string cannot hold in the key are percent-encoded": {
			"tiercache", CacheStatus{Hit: true, Key: "a\x00b\xc3\xa9c%"},
			`tiercache; hit; key="a%00b%C3%A9c%25"`,
		},
		"nothing known: the name alone": {
			"tiercache", CacheStatus{},
			"tiercache",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := string(AppendCacheStatus(nil, tc.name, tc.s)); got != tc.want {
				t.Errorf("AppendCacheStatus = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTTLSecondsIsBounded(t *testing.T) {
	if got := ttlSeconds(time.Duration(1<<63 - 1)); got > 999_999_999_999_999 {
		t.Errorf("ttlSeconds(max) = %d, beyond an sf-integer", got)
	}
	if got := ttlSeconds(time.Duration(-1 << 63)); got < -999_999_999_999_999 {
		t.Errorf("ttlSeconds(min) = %d, beyond an sf-integer", got)
	}
}

func TestHitMembersAreTheBuiltMemberAndShareOneStringPerSecond(t *testing.T) {
	m := NewHitMembers("tiercache", "static")
	for _, ttl := range []time.Duration{42 * time.Second, 42*time.Second + 500*time.Millisecond, 106 * time.Second, -3 * time.Second, 42 * time.Second} {
		want := string(AppendCacheStatus(nil, "tiercache", CacheStatus{Hit: true, TTL: ttl, HasTTL: true, Detail: "static"}))
		if got := m.Member(ttl); got != want {
			t.Errorf("Member(%v) = %q, want %q", ttl, got, want)
		}
	}
	m.Member(10 * time.Second)
	if n := testing.AllocsPerRun(100, func() { m.Member(10 * time.Second) }); n != 0 {
		t.Errorf("a second hit in the same second allocates %v times, want 0", n)
	}
}
