package cachekey

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAppendKeyExtras(t *testing.T) {
	tests := map[string]struct {
		key    spec
		header http.Header
		want   string
	}{
		"without headers or cookies nothing is appended": {
			spec{}, http.Header{"Accept-Language": {"de"}}, "",
		},
		"a header's values are joined with commas under its lowercase name": {
			spec{Headers: []string{"Accept-Language"}},
			http.Header{"Accept-Language": {"de", "en;q=0.5"}},
			"\x00h:accept-language=de,en;q=0.5",
		},
		"a header name is looked up case-insensitively": {
			spec{Headers: []string{"x-tenant"}},
			http.Header{"X-Tenant": {"acme"}},
			"\x00h:x-tenant=acme",
		},
		"an absent header has an empty value": {
			spec{Headers: []string{"X-Tenant"}}, http.Header{}, "\x00h:x-tenant=",
		},
		"headers come in configured order": {
			spec{Headers: []string{"X-B", "X-A"}},
			http.Header{"X-A": {"1"}, "X-B": {"2"}},
			"\x00h:x-b=2\x00h:x-a=1",
		},
		"a cookie's value joins the key": {
			spec{Cookies: []string{"currency"}},
			http.Header{"Cookie": {"session=abc; currency=EUR; theme=dark"}},
			"\x00c:currency=EUR",
		},
		"an absent cookie differs from an empty one": {
			spec{Cookies: []string{"currency", "theme"}},
			http.Header{"Cookie": {"theme="}},
			"\x00c:currency\x01\x00c:theme=",
		},
		"cookies are found across Cookie lines": {
			spec{Cookies: []string{"b"}},
			http.Header{"Cookie": {"a=1", "b=2"}},
			"\x00c:b=2",
		},
		"the first cookie of a name wins": {
			spec{Cookies: []string{"a"}},
			http.Header{"Cookie": {"a=1; a=2"}},
			"\x00c:a=1",
		},
		"cookie names compare case-sensitively": {
			spec{Cookies: []string{"id"}},
			http.Header{"Cookie": {"ID=1"}},
			"\x00c:id\x01",
		},
		"a cookie whose name merely starts with the wanted one does not count": {
			spec{Cookies: []string{"id"}},
			http.Header{"Cookie": {"idx=1;id2=2"}},
			"\x00c:id\x01",
		},
		"headers come before cookies, each in configured order": {
			spec{Cookies: []string{"c"}, Headers: []string{"X-H"}},
			http.Header{"Cookie": {"c=v"}, "X-H": {"h"}},
			"\x00h:x-h=h\x00c:c=v",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := queryRule(t, tt.key)
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			req.Header = tt.header
			got := r.AppendExtras([]byte("k"), req)
			if string(got) != "k"+tt.want {
				t.Fatalf("AppendKeyExtras = %q, want %q", got[1:], tt.want)
			}
		})
	}
}

func TestAppendKeyExtrasDoesNotAllocate(t *testing.T) {
	r := queryRule(t, spec{Headers: []string{"accept-language", "X-Tenant"}, Cookies: []string{"currency", "missing"}})
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set("Accept-Language", "de")
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("Cookie", "session=abc; currency=EUR")
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(200, func() { dst = r.AppendExtras(dst[:0], req) }); n != 0 {
		t.Fatalf("AppendKeyExtras allocates %v times", n)
	}
}

func TestKeyHeaders(t *testing.T) {
	if got := queryRule(t, spec{}).Headers(); got != nil {
		t.Fatalf("KeyHeaders() without headers = %q, want nil", got)
	}
	got := queryRule(t, spec{Headers: []string{"accept-language", "X-Tenant"}, Cookies: []string{"c"}}).Headers()
	if len(got) != 2 || got[0] != "Accept-Language" || got[1] != "X-Tenant" {
		t.Fatalf("KeyHeaders() = %q, want the canonical names in configured order", got)
	}
}

func TestAmbiguousCookies(t *testing.T) {
	tests := map[string]struct {
		keyed  string
		cookie []string
		want   bool
	}{
		"no cookie is not ambiguous":                          {"lang", nil, false},
		"the keyed cookie once is not ambiguous":              {"lang", []string{"a=1; lang=fr; b=2"}, false},
		"other cookies are not looked at":                     {"lang", []string{"LANGUAGE=x; lan=y"}, false},
		"the keyed cookie twice is ambiguous":                 {"lang", []string{"lang=en; lang=fr"}, true},
		"the keyed cookie on two lines is ambiguous":          {"lang", []string{"lang=en", "lang=fr"}, true},
		"space between the name and '=' is ambiguous":         {"lang", []string{"lang =fr"}, true},
		"the name in another case is ambiguous":               {"lang", []string{"LANG=evil; lang=fr"}, true},
		"the name percent-encoded is ambiguous":               {"lang", []string{"%6cang=evil; lang=fr"}, true},
		"the name percent-encoded alone is ambiguous":         {"lang", []string{"a=1; %6C%61ng=evil"}, true},
		"the name in capitals alone is ambiguous":             {"lang", []string{"a=1", "LANG=evil"}, true},
		"the name after a comma is ambiguous":                 {"lang", []string{"x=1,lang=evil; lang=fr"}, true},
		"a comma inside another cookie's value is fine":       {"lang", []string{"x=1,2; lang=fr"}, false},
		"the name before a comma is ambiguous":                {"lang", []string{"lang,x=evil"}, true},
		"leading space after the separator is not ambiguous":  {"lang", []string{"a=1;   lang=fr"}, false},
		"a name that only starts with the keyed one is fine":  {"lang", []string{"langs=1; lang=fr"}, false},
		"an encoded name that decodes to another one is fine": {"lang", []string{"%6cangs=1; lang=fr"}, false},

		"a keyed name with '_' sent once is not ambiguous":                           {"session_id", []string{"a=1; session_id=x"}, false},
		"the name with a '.' for '_' beside it is ambiguous (PHP reads both as one)": {"session_id", []string{"session.id=evil; session_id=x"}, true},
		"the name with a '.' for '_' alone is ambiguous":                             {"session_id", []string{"a=1; session.id=evil"}, true},
		"the name with a space for '_' is ambiguous":                                 {"session_id", []string{"a=1; session id=evil"}, true},
		"the name with a '+' for '_' is ambiguous (PHP decodes it to a space)":       {"session_id", []string{"a=1; session+id=evil"}, true},
		"the name with a lone '[' for '_' is ambiguous":                              {"session_id", []string{"a=1; session[id=evil"}, true},
		"the name with a percent-encoded '.' for '_' is ambiguous":                   {"session_id", []string{"a=1; session%2Eid=evil"}, true},
		"the name in capitals with a '.' for '_' is ambiguous":                       {"session_id", []string{"SESSION.ID=evil"}, true},
		"a '-' for '_' is another cookie":                                            {"session_id", []string{"session-id=1; session_id=x"}, false},
		"a longer name with a '.' for '_' is another cookie":                         {"session_id", []string{"session.ids=1; session_id=x"}, false},
		"a value spelt like the name with a '.' is fine":                             {"session_id", []string{"a=session.id; session_id=x"}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := queryRule(t, spec{Cookies: []string{tt.keyed}})
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			req.Header = http.Header{}
			if tt.cookie != nil {
				req.Header["Cookie"] = tt.cookie
			}
			if got := r.AmbiguousCookies(req); got != tt.want {
				t.Fatalf("AmbiguousCookies(%q) keyed on %s = %v, want %v", tt.cookie, tt.keyed, got, tt.want)
			}
		})
	}
}

func TestContainsLooseName(t *testing.T) {
	tests := map[string]struct {
		s, sub string
		want   bool
	}{
		"an exact occurrence at the start":               {"session=1", "session", true},
		"an occurrence at the very end":                  {"a=1; x=session", "session", true},
		"an occurrence in capitals":                      {"a=1; SESSION=2", "session", true},
		"an occurrence in mixed case":                    {"a=1; SeSsIoN=2", "session", true},
		"a name in capitals found in lowercase":          {"a=1; session=2", "SESSION", true},
		"no occurrence":                                  {"_ga=GA1.2.3; theme=dark; consent=yes", "session", false},
		"many near misses of the first byte":             {"sss sess sessio sessiox", "session", false},
		"a text shorter than the name":                   {"sess", "session", false},
		"a name that does not start with a letter":       {"a=1; _Ga=2", "_ga", true},
		"a one-byte name":                                {"abc", "C", true},
		"the empty name is in everything":                {"", "", true},
		"a letter does not fold into a non-letter":       {"a=1; [ession=2", "{ession", false},
		"an occurrence found only in the other case":     {"SsSsession", "SESSION", true},
		"a match that would run past the end is missed":  {"xsessio", "session", false},
		"a '.' for the name's '_'":                       {"a=1; session.id=2", "session_id", true},
		"a space for the name's '_'":                     {"a=1; session id=2", "session_id", true},
		"a '+' for the name's '_'":                       {"a=1; SESSION+ID=2", "session_id", true},
		"a '[' for the name's '_'":                       {"a=1; session[id=2", "session_id", true},
		"a '_' for the name's '.'":                       {"a=1; session_id=2", "session.id", true},
		"a separator first, spelt another way":           {"a=1; .ga=2", "_ga", true},
		"a separator first, found only later":            {"_x; _y; _Ga=2", "_ga", true},
		"a separator first, not there":                   {"_x;_y;ga=2", "_ga", false},
		"a space before the rest reads as the separator": {"a=1; ga=2", "_ga", true},
		"a '-' is not a separator":                       {"a=1; session-id=2", "session_id", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := containsLooseName(tt.s, tt.sub); got != tt.want {
				t.Fatalf("containsLooseName(%q, %q) = %v, want %v", tt.s, tt.sub, got, tt.want)
			}
		})
	}
}
