package invalidate

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestPurgeBodyErrors(t *testing.T) {
	p, _, c := newPurger(t, "")
	srv := httptest.NewServer(Handler(p, tierconfig.NewHolder(c), HandlerOptions{}))
	defer srv.Close()
	over := `{"urls":["/a"]}` + strings.Repeat(" ", maxBody)
	limit := "limit of " + strconv.Itoa(maxBody) + " bytes"
	tests := []struct {
		name    string
		body    io.Reader
		length  int64 // -1: chunked, no Content-Length
		want    int
		wantMsg string
	}{
		{"a body over the limit with its Content-Length is 413", strings.NewReader(over), int64(len(over)), http.StatusRequestEntityTooLarge, limit},
		{"a chunked body over the limit is 413", strings.NewReader(over), -1, http.StatusRequestEntityTooLarge, limit},
		{
			"an object whose value runs past the limit is 413",
			strings.NewReader(`{"urls":["/` + strings.Repeat("a", maxBody) + `"]}`), -1,
			http.StatusRequestEntityTooLarge, limit,
		},
		{"a body of exactly the limit is read", strings.NewReader(`{"urls":["/a"]}` + strings.Repeat(" ", maxBody-len(`{"urls":["/a"]}`))), -1, http.StatusOK, ""},
		{"malformed JSON is 400", strings.NewReader(`{"urls":`), -1, http.StatusBadRequest, "invalid JSON body"},
		{"data after the object is 400", strings.NewReader(`{"urls":["/a"]} {}`), -1, http.StatusBadRequest, "data after the object"},
		{"an unknown field is 400", strings.NewReader(`{"url":["/a"]}`), -1, http.StatusBadRequest, `unknown field "url"`},
		{"soft other than true or false is 400 naming it", strings.NewReader(`{"urls":["/a"],"soft":"yes"}`), -1, http.StatusBadRequest, "purge: soft: must be true or false (got a JSON string)"},
		{"urls other than a list is 400 naming it", strings.NewReader(`{"urls":"/a"}`), -1, http.StatusBadRequest, "purge: urls: must be a list of strings (got a JSON string)"},
		{"a tag that is not a string is 400 naming the field", strings.NewReader(`{"tags":[1]}`), -1, http.StatusBadRequest, "purge: tags"},
		{"a soft purge is answered as one", strings.NewReader(`{"urls":["/a"],"soft":true}`), -1, http.StatusOK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/purge", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.length
			req.Header.Set("Content-Type", "application/json")
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var got map[string]any
			if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
				t.Fatalf("answer is not JSON: %v", err)
			}
			msg, _ := got["error"].(string)
			if res.StatusCode != tc.want || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("got %d %v, want %d with an error containing %q", res.StatusCode, got, tc.want, tc.wantMsg)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}
