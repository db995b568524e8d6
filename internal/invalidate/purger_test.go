package invalidate

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

func newPurger(t *testing.T, cfgYAML string) (*Purger, *l1.Cache, *tierconfig.Compiled) {
	t.Helper()
	cfg, err := tierconfig.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tierconfig.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cache, err := l1.New(ctx, l1.Config{MaxSize: 16 << 20, MaxEntrySize: 64 << 10, Shards: 16, LifeWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cache.Close() })
	return NewPurger(cache, tierconfig.NewHolder(c)), cache, c
}

// put stores a response entry under the key the proxy would use.
func put(t *testing.T, cache *l1.Cache, scheme, host, target string, tags ...string) string {
	t.Helper()
	key := string(cachekey.AppendPrimary(nil, scheme, host, target))
	e := &entry.Entry{Kind: entry.KindResponse, Host: host, Target: target, Tags: tags, Status: 200,
		Body: []byte("x"), ResponseTime: time.Now(), Lifetime: time.Hour}
	if err := cache.Set(key, e); err != nil {
		t.Fatal(err)
	}
	return key
}

func present(cache *l1.Cache, key string) bool {
	_, err := cache.Get(key)
	return err == nil
}

func TestPurgeByURLPrefixAndTag(t *testing.T) {
	cases := []struct {
		name   string
		req    Request
		gone   []string // targets expected gone (on every host)
		purged int
	}{
		{"an origin-form URL purges that path on every host", Request{URLs: []string{"/a?x=1"}}, []string{"a.example/a?x=1", "b.example/a?x=1"}, 2},
		{"an absolute URL purges one host only", Request{URLs: []string{"http://a.example/a?x=1"}}, []string{"a.example/a?x=1"}, 1},
		{"a default port in the URL does not matter", Request{URLs: []string{"https://a.example:443/a?x=1"}}, []string{"a.example/a?x=1"}, 1},
		// "/x/..%2fapi/3" is "/api/3" to an origin that decodes and cleans.
		{"a prefix purges everything some reading puts under it", Request{Prefix: "/api/"}, []string{"a.example/api/1", "a.example/api/2", "a.example/x/..%2fapi/3"}, 3},
		{"a tag purges every tagged entry", Request{Tags: []string{"blue"}}, []string{"a.example/api/1", "b.example/a?x=1"}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, cache, _ := newPurger(t, "")
			// A fill of each resource is in progress while the purge runs.
			watches := map[string]*Watch{}
			tagsOf := map[string][]string{"b.example/a?x=1": {"blue"}, "a.example/api/1": {"blue"}}
			for _, name := range []string{"a.example/a?x=1", "b.example/a?x=1", "a.example/api/1", "a.example/api/2", "a.example/a?x=2", "a.example/x/..%2fapi/3"} {
				host, target, _ := strings.Cut(name, "/")
				watches[name] = p.Watch(host, "/"+target)
				defer watches[name].End()
			}
			all := map[string]string{
				"a.example/a?x=1":        put(t, cache, "http", "a.example", "/a?x=1"),
				"b.example/a?x=1":        put(t, cache, "http", "b.example", "/a?x=1", "blue"),
				"a.example/api/1":        put(t, cache, "http", "a.example", "/api/1", "blue"),
				"a.example/api/2":        put(t, cache, "http", "a.example", "/api/2"),
				"a.example/a?x=2":        put(t, cache, "http", "a.example", "/a?x=2"),
				"a.example/x/..%2fapi/3": put(t, cache, "http", "a.example", "/x/..%2fapi/3"),
			}
			if res, err := p.Purge(context.Background(), c.req); err != nil || res.Purged != c.purged || res.L1 != c.purged || res.L2 != nil {
				t.Fatalf("purged %+v, %v; want %d from L1 only", res, err, c.purged)
			}
			for name, key := range all {
				want := !slices.Contains(c.gone, name)
				if present(cache, key) != want {
					t.Errorf("%s present = %v, want %v", name, !want, want)
				}
				if stored := watches[name].Commit(tagsOf[name], func() {}); stored != want {
					t.Errorf("a fill of %s in progress during the purge: stored = %v, want %v", name, stored, want)
				}
			}
		})
	}
}

func TestPurgeShapesTheURLLikeTheProxyKeysIt(t *testing.T) {
	p, cache, _ := newPurger(t, `
rules:
- name: strip-utm
  match: {pathPrefix: /}
  cacheKey: {queryExclude: ["utm_*"], sortQuery: true}
`)
	key := put(t, cache, "http", "a.example", "/page?a=1&b=2")
	if res, _ := p.Purge(context.Background(), Request{URLs: []string{"/page?utm_source=x&b=2&a=1"}}); res.Purged != 1 || present(cache, key) {
		t.Fatalf("purged %d, entry present %v", res.Purged, present(cache, key))
	}
}

func TestInvalidateDeletesBothSchemesWithoutScanning(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	k1 := put(t, cache, "http", "a.example", "/x")
	k2 := put(t, cache, "https", "a.example", "/x")
	k3 := put(t, cache, "http", "a.example", "/y")
	u, _ := url.Parse("https://A.example/x")
	p.Invalidate(context.Background(), []*url.URL{u})
	if present(cache, k1) || present(cache, k2) || !present(cache, k3) {
		t.Fatalf("after invalidate: http %v https %v other %v", present(cache, k1), present(cache, k2), present(cache, k3))
	}
}

// noScan is an L1 that fails the test when asked to scan.
type noScan struct {
	*l1.Cache
	t *testing.T
}

func (n noScan) DeleteMatching(func(e *entry.Entry) bool) int {
	n.t.Error("invalidation scanned L1")
	return 0
}

func TestInvalidateUnderAKeyedRuleRetiresEveryVariantWithoutAScan(t *testing.T) {
	_, cache, c := newPurger(t, `
rules:
- name: by-lang
  match: {pathPrefix: /}
  cacheKey: {headers: [Accept-Language]}
`)
	p := NewPurger(noScan{cache, t}, tierconfig.NewHolder(c))
	// Under a keyed rule the primary key holds the marker; the variants
	// (one per Accept-Language) are reached only through its nonce.
	marker := put(t, cache, "http", "a.example", "/x")
	u, _ := url.Parse("http://a.example/x")
	p.Invalidate(context.Background(), []*url.URL{u})
	if present(cache, marker) {
		t.Fatal("the marker of a URL keyed on a header survived invalidation, so its variants are still reachable")
	}
}

func TestValidateNamesWhatIsWrong(t *testing.T) {
	cases := map[string]struct {
		req  Request
		want string
	}{
		"an empty request":         {Request{}, "nothing to purge"},
		"a relative URL":           {Request{URLs: []string{"x/y"}}, "urls[0]: must be absolute"},
		"a foreign scheme":         {Request{URLs: []string{"/ok", "ftp://h/x"}}, "urls[1]: scheme must be http or https"},
		"a host without a path":    {Request{URLs: []string{"http://h"}}, "urls[0]: URL without a path"},
		"a prefix without a slash": {Request{Prefix: "api"}, "prefix: must start with /"},
		"a tag with a space":       {Request{Tags: []string{"a b"}}, "tags[0]"},
		"too many URLs":            {Request{URLs: make([]string, maxURLs+1)}, "urls: at most"},
	}
	for name, c := range cases {
		err := c.req.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if err := (Request{URLs: []string{"/a?b=c", "https://h/x"}, Prefix: "/p/", Tags: []string{"t"}}).Validate(); err != nil {
		t.Fatalf("a valid request was refused: %v", err)
	}
}

func TestWithoutATokenPurgesComeOnlyFromLoopback(t *testing.T) {
	cases := map[string]struct {
		remote, token, auth string
		want                int
	}{
		"a pod-network peer without a token is refused": {"10.1.2.3:5555", "", "", http.StatusForbidden},
		"IPv4 loopback is accepted":                     {"127.0.0.1:5555", "", "", 0},
		"IPv6 loopback is accepted":                     {"[::1]:5555", "", "", 0},
		"IPv4-mapped 127.0.0.1 is accepted":             {"[::ffff:127.0.0.1]:5555", "", "", 0},
		"a mesh proxy's 127.0.0.6 is refused":           {"127.0.0.6:5555", "", "", http.StatusForbidden},
		"the rest of 127.0.0.0/8 is refused":            {"127.1.2.3:5555", "", "", http.StatusForbidden},
		"IPv4-mapped 127.0.0.6 is refused":              {"[::ffff:127.0.0.6]:5555", "", "", http.StatusForbidden},
		"an address without a port is refused":          {"127.0.0.1", "", "", http.StatusForbidden},
		"with a token, loopback needs it too":           {"127.0.0.1:5555", "0123456789abcdef", "", http.StatusUnauthorized},
		"with a token, any peer holding it is accepted": {"10.1.2.3:5555", "0123456789abcdef", "Bearer 0123456789abcdef", 0},
	}
	for name, c := range cases {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		if status, _ := authorize(r, c.token); status != c.want {
			t.Errorf("%s: got %d, want %d", name, status, c.want)
		}
	}
}

func TestMessagesFromOtherSidecarsApplyToL1(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	p.SetRemote(nil, "me", time.Second, nil)
	red := put(t, cache, "http", "a.example", "/red", "red")
	blue := put(t, cache, "http", "a.example", "/blue")
	fill := p.Watch("a.example", "/other") // a fill of a red-tagged resource in progress
	defer fill.End()

	p.HandleMessage([]byte(`{"from":"me","tags":["red"]}`))
	if !present(cache, red) {
		t.Fatal("a sidecar applied its own message a second time")
	}
	p.HandleMessage([]byte(`{"from":"other","tags":["red"`))
	if !present(cache, red) {
		t.Fatal("a malformed message had an effect")
	}
	p.HandleMessage([]byte(`{"from":"other","tags":["red"]}`))
	if present(cache, red) || !present(cache, blue) {
		t.Fatalf("after a tag message: red %v blue %v", present(cache, red), present(cache, blue))
	}
	if fill.Commit([]string{"red"}, func() {}) {
		t.Fatal("a fill in progress stored a red-tagged response after another sidecar purged the tag")
	}
	p.HandleMessage([]byte(`{"from":"other","invalidate":["http://a.example/blue"]}`))
	if present(cache, blue) {
		t.Fatal("an invalidation message left the entry")
	}
}

func TestAResubscriptionClearsL1ButTheFirstSubscriptionDoesNot(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	key := put(t, cache, "http", "a.example", "/x")
	p.Subscribed(context.Background(), time.Now())
	if !present(cache, key) {
		t.Fatal("the first subscription cleared L1 (warm-started entries would be lost)")
	}
	p.Subscribed(context.Background(), time.Now())
	if present(cache, key) {
		t.Fatal("a resubscription kept L1, so purges missed while disconnected could be served")
	}
}

// steps records the order of a purger's deletions.
type steps struct{ got []string }

type recordingL1 struct {
	*l1.Cache
	s *steps
}

func (r recordingL1) Delete(key string) { r.s.got = append(r.s.got, "l1"); r.Cache.Delete(key) }
func (r recordingL1) DeleteMatching(m func(e *entry.Entry) bool) int {
	r.s.got = append(r.s.got, "l1")
	return r.Cache.DeleteMatching(m)
}
func (r recordingL1) ExpireMatching(at time.Time, m func(e *entry.Entry) bool) int {
	r.s.got = append(r.s.got, "l1")
	return r.Cache.ExpireMatching(at, m)
}

// recordingL2 stands for L2 in the order test only: what matters is when
// the purger calls it.
type recordingL2 struct{ s *steps }

func (r recordingL2) Purge(context.Context, Selector, Mode) (int, error) {
	r.s.got = append(r.s.got, "l2")
	return 0, nil
}
func (r recordingL2) Publish(context.Context, []byte) error { return nil }
func (r recordingL2) NextSeq(context.Context) (uint64, error) {
	return 0, errors.New("no sequence in the order test")
}
func (r recordingL2) Seq(context.Context) (uint64, bool, error) {
	return 0, false, errors.New("no sequence in the order test")
}
func (r recordingL2) Forget(Selector) { r.s.got = append(r.s.got, "forget") }

func TestPurgesClearL2BeforeL1(t *testing.T) {
	// A request that misses L1 while a purge runs must not find the old
	// L2 copy after the L1 delete: queued writes are dropped first, then
	// L2 is cleared, then L1.
	for name, purge := range map[string]func(p *Purger){
		"an unsafe request": func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}})
		},
		"a purge by URL": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
		},
		"a purge by prefix": func(p *Purger) { _, _ = p.Purge(context.Background(), Request{All: true}) },
		"a soft purge by URL": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}, Soft: true})
		},
		"a soft purge by tag": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{Tags: []string{"t"}, Soft: true})
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, cache, c := newPurger(t, "")
			s := &steps{}
			p := NewPurger(recordingL1{cache, s}, tierconfig.NewHolder(c))
			p.SetRemote(recordingL2{s}, "me", time.Second, nil)
			p.again.after = time.Hour // its repeat is not this test's subject
			purge(p)
			first := map[string]int{}
			for i, step := range s.got {
				if _, ok := first[step]; !ok {
					first[step] = i
				}
			}
			if !(first["forget"] < first["l2"] && first["l2"] < first["l1"]) {
				t.Fatalf("steps %v, want queued writes forgotten, then L2, then L1", s.got)
			}
		})
	}
}
