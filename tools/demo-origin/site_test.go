package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
)

func decodeBody(t *testing.T, coding string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch coding {
	case "":
		return body
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		r = zr
	default:
		t.Fatalf("unexpected Content-Encoding %q", coding)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", coding, err)
	}
	return out
}

func TestChooseCoding(t *testing.T) {
	tests := map[string]struct{ ae, want string }{
		"Chrome's list gets br":               {"gzip, deflate, br, zstd", "br"},
		"no header gets identity":             {"", "identity"},
		"gzip alone gets gzip":                {"gzip", "gzip"},
		"br refused with q=0 falls to gzip":   {"br;q=0, gzip", "gzip"},
		"a star accepts br":                   {"*", "br"},
		"a star with br refused gives gzip":   {"*, br;q=0", "gzip"},
		"everything refused gives identity":   {"br;q=0, gzip;q=0", "identity"},
		"unknown codings alone give identity": {"compress, x-foo", "identity"},
		"case and spacing do not matter":      {" GZIP ;q=0.5 , Br;q=0.8", "br"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := chooseCoding(tt.ae); got != tt.want {
				t.Errorf("chooseCoding(%q) = %q, want %q", tt.ae, got, tt.want)
			}
		})
	}
}

func TestSiteCompressesPerAcceptEncodingWithVary(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	var plain []byte
	for _, tt := range []struct{ ae, coding string }{
		{"", ""}, {"gzip, deflate", "gzip"}, {"gzip, deflate, br, zstd", "br"},
	} {
		resp, body := get(t, srv.URL+"/site/articles/a1.html", "Accept-Encoding", tt.ae)
		if resp.StatusCode != 200 {
			t.Fatalf("%q: status %d", tt.ae, resp.StatusCode)
		}
		if got := resp.Header.Get("Content-Encoding"); got != tt.coding {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", tt.ae, got, tt.coding)
		}
		if got := resp.Header.Get("Vary"); got != "Accept-Encoding" {
			t.Errorf("Accept-Encoding %q: Vary %q", tt.ae, got)
		}
		if got := resp.Header.Get("Cache-Control"); got != "public, max-age=300" {
			t.Errorf("anonymous page: Cache-Control %q", got)
		}
		dec := decodeBody(t, tt.coding, body)
		if plain == nil {
			plain = dec
			if !bytes.Contains(plain, []byte("tc-anonymous")) || len(plain) < 6<<10 {
				t.Fatalf("anonymous page of %d bytes without its marker", len(plain))
			}
		} else if !bytes.Equal(dec, plain) {
			t.Errorf("Accept-Encoding %q: decoded body differs from the identity one", tt.ae)
		}
		if tt.coding != "" && len(body)*2 > len(plain) {
			t.Errorf("%s body %d bytes for %d plain: not compressed", tt.coding, len(body), len(plain))
		}
	}
}

func TestSitePersonalisesForTheSessionCookie(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	cookie := "_ga=GA1.1.1.2; sid=abc123; _fbp=fb.1.2.3"
	for _, tt := range []struct{ path, cc string }{
		{"/site/articles/a1.html", "private, max-age=0, must-revalidate"},
		{"/site/api/items/i1.json", "no-store"},
	} {
		resp, body := get(t, srv.URL+tt.path, "Cookie", cookie, "Accept-Encoding", "gzip")
		if got := resp.Header.Get("Cache-Control"); got != tt.cc {
			t.Errorf("%s signed in: Cache-Control %q, want %q", tt.path, got, tt.cc)
		}
		if resp.Header.Get("ETag") != "" {
			t.Errorf("%s signed in: a personal answer has an ETag", tt.path)
		}
		dec := decodeBody(t, resp.Header.Get("Content-Encoding"), body)
		if !bytes.Contains(dec, []byte("tc-session=abc123;")) || bytes.Contains(dec, []byte("tc-anonymous")) {
			t.Errorf("%s signed in: body without the session's marker", tt.path)
		}
	}
	// Analytics cookies alone are anonymous; assets are never personal.
	resp, body := get(t, srv.URL+"/site/articles/a1.html", "Cookie", "_ga=GA1.1.1.2")
	if !bytes.Contains(body, []byte("tc-anonymous")) || resp.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Errorf("analytics cookie only: want the anonymous page, got Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
	resp, body = get(t, srv.URL+"/site/static/s1.css", "Cookie", cookie)
	if resp.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || bytes.Contains(body, []byte("tc-session")) {
		t.Errorf("stylesheet for a signed-in visitor: Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
}

func TestSiteKindsHeadersAndRevalidation(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	tests := []struct{ path, ctype, cc string }{
		{"/site/api/items/i2.json?page=2&sort=new", "application/json", "public, max-age=60"},
		{"/site/static/j3.js", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"},
		{"/site/img/m4.png", "image/png", "public, max-age=86400"},
		{"/site/img/m4.jpg", "image/jpeg", "public, max-age=86400"},
	}
	for _, tt := range tests {
		resp, _ := get(t, srv.URL+tt.path, "Accept-Encoding", "br")
		if resp.Header.Get("Content-Type") != tt.ctype || resp.Header.Get("Cache-Control") != tt.cc {
			t.Errorf("%s: Content-Type %q, Cache-Control %q; want %q, %q", tt.path,
				resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), tt.ctype, tt.cc)
		}
		if strings.HasPrefix(tt.ctype, "image/") && (resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Vary") != "") {
			t.Errorf("%s: an image is sent as it is, without Vary", tt.path)
		}
		etag := resp.Header.Get("ETag")
		if etag == "" {
			t.Fatalf("%s: no ETag", tt.path)
		}
		again, body := get(t, srv.URL+tt.path, "Accept-Encoding", "br", "If-None-Match", etag)
		if again.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Errorf("%s: If-None-Match of its ETag gave %d", tt.path, again.StatusCode)
		}
	}
	// The coding is part of the entity tag.
	gz, _ := get(t, srv.URL+"/site/static/j3.js", "Accept-Encoding", "gzip")
	br, _ := get(t, srv.URL+"/site/static/j3.js", "Accept-Encoding", "br")
	if gz.Header.Get("ETag") == br.Header.Get("ETag") {
		t.Errorf("gzip and br representations share the ETag %s", gz.Header.Get("ETag"))
	}
	if resp, _ := get(t, srv.URL+"/site/unknown.txt"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown type: %d, want 404", resp.StatusCode)
	}
}

func TestSiteCountsRequestsAndBytesByKind(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	var sent int64
	for _, p := range []string{"/site/articles/a1.html", "/site/img/m1.webp", "/site/img/m1.webp"} {
		_, body := get(t, srv.URL+p, "Accept-Encoding", "gzip")
		sent += int64(len(body))
	}
	s := originStats(t, srv.URL)
	if s.Requests != 3 || s.Bytes != sent {
		t.Errorf("stats = %d requests, %d bytes; want 3, %d", s.Requests, s.Bytes, sent)
	}
	if s.ByClass["site html 200"] != 1 || s.ByClass["site image 200"] != 2 {
		t.Errorf("by_class = %v", s.ByClass)
	}
}
