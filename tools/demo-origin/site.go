package main

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
)

// The /site/ route is the application under the browser-mix replay
// (loadgen replay, make bench part 9): a small site of pages, API answers,
// stylesheets, scripts and images on any Host, with the caching headers a
// real app of that kind sends. Text is compressed per request's
// Accept-Encoding (br before gzip) and sent with Vary: Accept-Encoding;
// images are sent as they are. A request with the session cookie gets its
// own page: the body carries the session's marker ("tc-session=<sid>;"),
// and the answer is private (pages) or no-store (API), as a framework
// that touched the session would make it. Anonymous pages carry
// "tc-anonymous" instead, so the replay can tell the two apart.

// SessionCookie is the cookie that signs a visitor in.
const SessionCookie = "sid"

// siteMemoMax bounds the compressed anonymous bodies kept (per path,
// host and coding): a real site's asset pipeline and page cache keep
// those; past the bound, bodies are compressed per request.
const siteMemoMax = 50000

// siteKind is the type of a /site/ resource, from its path.
func siteKind(path string) string {
	switch {
	case strings.HasPrefix(path, "/site/api/") && strings.HasSuffix(path, ".json"):
		return "json"
	case strings.HasSuffix(path, ".html"), strings.HasSuffix(path, "/"):
		return "html"
	case strings.HasSuffix(path, ".css"):
		return "css"
	case strings.HasSuffix(path, ".js"):
		return "js"
	case strings.HasSuffix(path, ".jpg"), strings.HasSuffix(path, ".png"), strings.HasSuffix(path, ".webp"):
		return "image"
	}
	return ""
}

var siteTypes = map[string]string{
	"html": "text/html; charset=utf-8",
	"json": "application/json",
	"css":  "text/css; charset=utf-8",
	"js":   "text/javascript; charset=utf-8",
}

// siteCacheControl is what the app sends for a kind, anonymous or signed in.
func siteCacheControl(kind string, personal bool) string {
	switch {
	case personal && kind == "json":
		return "no-store"
	case personal:
		return "private, max-age=0, must-revalidate"
	case kind == "html":
		return "public, max-age=300"
	case kind == "json":
		return "public, max-age=60"
	case kind == "css", kind == "js":
		return "public, max-age=31536000, immutable"
	default: // images
		return "public, max-age=86400"
	}
}

// sessionOf is the value of the session cookie, "" when absent.
func sessionOf(r *http.Request) string {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

// chooseCoding picks br, then gzip, then identity from Accept-Encoding
// (RFC 9110 §12.5.3: q=0 refuses a coding, * stands for the others).
func chooseCoding(ae string) string {
	q := map[string]float64{}
	star := -1.0
	for _, part := range strings.Split(ae, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		w := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				w = f
			}
		}
		if name == "*" {
			star = w
			continue
		}
		q[name] = w
	}
	accepts := func(c string) bool {
		if w, ok := q[c]; ok {
			return w > 0
		}
		return star > 0
	}
	for _, c := range []string{"br", "gzip"} {
		if accepts(c) {
			return c
		}
	}
	return "identity"
}

// siteWords are the text pages are made of: repeated words compress as
// real markup and prose do (about 4-8x).
var siteWords = strings.Fields(`the cache origin request response header body page article product price
review cart checkout account session browser client server network latency stored fresh stale
revalidate purge tier rule lifetime variant encoding compressed gzip brotli image script style
section navigation footer menu search result category offer shipping delivery return order`)

// siteBody is the anonymous body of a resource: fixed by host and path.
func (o *origin) siteBody(host, path, kind string) []byte {
	h := fnv.New64a()
	_, _ = h.Write([]byte(host + path))
	seed := h.Sum64()
	if kind == "image" {
		size := 2048 + int(seed%(60<<10))
		off := int(seed>>20) % len(o.block)
		img := make([]byte, 0, size)
		for len(img) < size {
			img = append(img, o.block[off:min(len(o.block), off+size-len(img))]...)
			off = 0
		}
		return img
	}
	var size int
	switch kind {
	case "html":
		size = 6<<10 + int(seed%(34<<10))
	case "json":
		size = 1<<10 + int(seed%(7<<10))
	case "css":
		size = 4<<10 + int(seed%(40<<10))
	default: // js
		size = 8<<10 + int(seed%(120<<10))
	}
	var b bytes.Buffer
	b.Grow(size + 256)
	switch kind {
	case "html":
		fmt.Fprintf(&b, "<!doctype html><html><head><title>%s%s</title></head><body><!-- tc-anonymous -->\n", host, path)
	case "json":
		fmt.Fprintf(&b, `{"host":%q,"path":%q,"marker":"tc-anonymous","items":[`, host, path)
	default:
		fmt.Fprintf(&b, "/* %s%s */\n", host, path)
	}
	x := seed
	for i := 0; b.Len() < size; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		w := siteWords[(x>>33)%uint64(len(siteWords))]
		switch kind {
		case "html":
			fmt.Fprintf(&b, "<p class=\"%s\">%s %d</p>\n", siteWords[(x>>40)%uint64(len(siteWords))], w, i)
		case "json":
			fmt.Fprintf(&b, `{"id":%d,"name":%q},`, i, w)
		default:
			fmt.Fprintf(&b, ".%s-%d{margin:%dpx}\n", w, i%97, i%13)
		}
	}
	switch kind {
	case "html":
		b.WriteString("</body></html>\n")
	case "json":
		b.WriteString(`{"id":-1}]}`)
	}
	return b.Bytes()
}

// personalise makes a signed-in visitor's page from the anonymous one:
// the session's marker replaces the anonymous one.
func personalise(body []byte, sid string) []byte {
	return bytes.Replace(body, []byte("tc-anonymous"), []byte("tc-session="+sid+";"), 1)
}

// encode compresses body with coding (br, gzip or identity).
func encode(body []byte, coding string) []byte {
	var b bytes.Buffer
	switch coding {
	case "br":
		w := brotli.NewWriterLevel(&b, 5)
		_, _ = w.Write(body)
		_ = w.Close()
	case "gzip":
		w, _ := gzip.NewWriterLevel(&b, gzip.DefaultCompression)
		_, _ = w.Write(body)
		_ = w.Close()
	default:
		return body
	}
	return b.Bytes()
}

// siteMemo keeps anonymous bodies as sent, by host, path and coding.
type siteMemo struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *siteMemo) get(key string, make func() []byte) []byte {
	s.mu.Lock()
	b, ok := s.m[key]
	s.mu.Unlock()
	if ok {
		return b
	}
	b = make()
	s.mu.Lock()
	if len(s.m) < siteMemoMax {
		s.m[key] = b
	}
	s.mu.Unlock()
	return b
}

func (o *origin) site(w http.ResponseWriter, r *http.Request) {
	kind := siteKind(r.URL.Path)
	if kind == "" {
		o.notFound(w, r)
		return
	}
	host := strings.ToLower(r.Host)
	sid := sessionOf(r)
	personal := sid != "" && (kind == "html" || kind == "json")
	coding := "identity"
	if kind != "image" {
		coding = chooseCoding(r.Header.Get("Accept-Encoding"))
	}
	h := w.Header()
	h.Set("Cache-Control", siteCacheControl(kind, personal))
	if kind != "image" {
		h.Set("Vary", "Accept-Encoding")
	}
	var sent []byte
	if personal {
		sent = encode(personalise(o.siteBody(host, r.URL.Path, kind), sid), coding)
	} else {
		sent = o.memo.get(host+r.URL.Path+" "+coding, func() []byte {
			return encode(o.siteBody(host, r.URL.Path, kind), coding)
		})
		// Strong, per representation: the coding is in it.
		sum := fnv.New64a()
		_, _ = sum.Write([]byte(host + r.URL.Path))
		etag := fmt.Sprintf(`"%x-%s"`, sum.Sum64(), coding)
		h.Set("ETag", etag)
		if notModified(r, etag, time.Time{}) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	if t, ok := siteTypes[kind]; ok {
		h.Set("Content-Type", t)
	} else {
		h.Set("Content-Type", imageType(r.URL.Path))
	}
	if coding != "identity" {
		h.Set("Content-Encoding", coding)
	}
	h.Set("Content-Length", strconv.Itoa(len(sent)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(sent)
}

func imageType(path string) string {
	switch {
	case strings.HasSuffix(path, ".png"):
		return "image/png"
	case strings.HasSuffix(path, ".webp"):
		return "image/webp"
	}
	return "image/jpeg"
}
