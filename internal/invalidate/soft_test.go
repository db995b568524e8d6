package invalidate

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l1"
)

// freshUntil returns when the entry under key stops being fresh, or the
// zero time when it is gone.
func freshUntil(t *testing.T, cache *l1.Cache, key string) time.Time {
	t.Helper()
	e, err := cache.Get(key)
	if err != nil {
		return time.Time{}
	}
	return e.FreshUntil()
}

func TestASoftPurgeMarksStaleWhatAHardPurgeWouldRemove(t *testing.T) {
	cases := []struct {
		name   string
		req    Request
		marked []string // expected stale, still stored
	}{
		{"an origin-form URL marks that path on every host", Request{URLs: []string{"/a?x=1"}}, []string{"a.example/a?x=1", "b.example/a?x=1"}},
		{"an absolute URL marks one host only", Request{URLs: []string{"http://a.example/a?x=1"}}, []string{"a.example/a?x=1"}},
		{"a prefix marks everything under it", Request{Prefix: "/api/"}, []string{"a.example/api/1", "a.example/api/2"}},
		{"a tag marks every tagged entry", Request{Tags: []string{"blue"}}, []string{"a.example/api/1", "b.example/a?x=1"}},
		{"all marks everything", Request{All: true}, []string{"a.example/a?x=1", "b.example/a?x=1", "a.example/api/1", "a.example/api/2", "a.example/a?x=2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, cache, _ := newPurger(t, "")
			watches := map[string]*Watch{}
			tagsOf := map[string][]string{"b.example/a?x=1": {"blue"}, "a.example/api/1": {"blue"}}
			all := map[string]string{}
			for _, name := range []string{"a.example/a?x=1", "b.example/a?x=1", "a.example/api/1", "a.example/api/2", "a.example/a?x=2"} {
				host, target, _ := strings.Cut(name, "/")
				watches[name] = p.Watch(host, "/"+target)
				defer watches[name].End()
				all[name] = put(t, cache, "http", host, "/"+target, tagsOf[name]...)
			}
			at := time.Now()
			p.clock = testingclock.NewFakeClock(at)
			c.req.Soft = true
			res, err := p.Purge(context.Background(), c.req)
			if err != nil || !res.Soft || res.L1 != len(c.marked) || res.Purged != len(c.marked) || res.L2 != nil || res.Bodies != 0 {
				t.Fatalf("answer %+v, %v; want soft, %d marked in L1", res, err, len(c.marked))
			}
			for name, key := range all {
				until := freshUntil(t, cache, key)
				if until.IsZero() {
					t.Errorf("%s: removed by a soft purge", name)
					continue
				}
				want := slices.Contains(c.marked, name)
				if stale := !until.After(at); stale != want {
					t.Errorf("%s: stale %v (fresh until %s, purge at %s), want %v", name, stale, until, at, want)
				}
				// A fill that began before the purge may have fetched
				// what it marks: served, not stored (as for a hard purge).
				if stored := watches[name].Commit(tagsOf[name], func() {}); stored == want {
					t.Errorf("a fill of %s in progress during the soft purge: stored = %v, want %v", name, stored, !want)
				}
			}
		})
	}
}

func TestASoftPurgeMessageMarksL1(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	p.SetRemote(nil, "me", time.Second, nil)
	red := put(t, cache, "http", "a.example", "/red", "red")
	blue := put(t, cache, "http", "a.example", "/blue")
	before := time.Now()
	p.HandleMessage([]byte(`{"from":"other","tags":["red"],"soft":true}`))
	if until := freshUntil(t, cache, red); until.IsZero() || until.After(time.Now()) || until.Before(before) {
		t.Fatalf("after a soft purge message the red entry is fresh until %s (zero: removed); want stale since the message arrived", until)
	}
	if until := freshUntil(t, cache, blue); !until.After(time.Now()) {
		t.Fatal("a soft purge message marked an entry it does not name")
	}
}

// oldMessage is what a sidecar of a version before soft purges decodes a
// message into (json.Unmarshal, unknown fields ignored).
type oldMessage struct {
	From       string   `json:"from"`
	Seq        uint64   `json:"seq,omitempty"`
	URLs       []string `json:"urls,omitempty"`
	Prefix     string   `json:"prefix,omitempty"`
	Tags       []string `json:"tags,omitempty"`
	All        bool     `json:"all,omitempty"`
	Invalidate []string `json:"invalidate,omitempty"`
}

// An old sidecar that receives a soft purge must purge rather than do
// nothing: it reads the request without "soft" and removes.
func TestAnOldSidecarReadsASoftPurgeAsAHardOne(t *testing.T) {
	for _, r := range []Request{
		{URLs: []string{"http://a.example/x", "/y"}, Soft: true},
		{Prefix: "/api/", Soft: true},
		{Tags: []string{"red"}, Soft: true},
		{All: true, Soft: true},
	} {
		b, err := json.Marshal(message{From: "new", Seq: 7, Request: r})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"soft":true`) {
			t.Fatalf("the message %s does not say it is soft", b)
		}
		var old oldMessage
		if err := json.Unmarshal(b, &old); err != nil {
			t.Fatalf("an old sidecar cannot decode %s: %v", b, err)
		}
		asOld := Request{URLs: old.URLs, Prefix: old.Prefix, Tags: old.Tags, All: old.All}
		want := r
		want.Soft = false
		if !slices.Equal(asOld.URLs, want.URLs) || asOld.Prefix != want.Prefix || !slices.Equal(asOld.Tags, want.Tags) || asOld.All != want.All || asOld.Validate() != nil {
			t.Fatalf("an old sidecar reads %s as %+v, want the hard purge %+v", b, asOld, want)
		}
	}
}

func TestSoftPurgesAreAuthorizedAndRateLimitedLikeHardOnes(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	p, cache, c := newPurger(t, "purge: {token: "+token+"}")
	key := put(t, cache, "http", "a.example", "/a")
	ps := newPurgeServer(t, p, c, NewLimiter(0.001, 10))

	if status, _, _ := ps.post(t, "127.0.0.1", "", `{"urls":["/a"],"soft":true}`); status != http.StatusUnauthorized {
		t.Fatalf("a soft purge without the token: %d, want 401", status)
	}
	if status, _, _ := ps.post(t, "", "wrong", `{"all":true,"soft":true}`); status != http.StatusUnauthorized {
		t.Fatalf("a soft purge with a wrong token: %d, want 401", status)
	}
	if until := freshUntil(t, cache, key); !until.After(time.Now()) {
		t.Fatal("an unauthorized soft purge marked the entry")
	}
	// A soft purge of everything takes the whole burst, as a hard one
	// does: a leaked token cannot keep every entry stale either.
	if status, msg, _ := ps.post(t, "", token, `{"all":true,"soft":true}`); status != http.StatusOK {
		t.Fatalf("a soft purge of everything: %d %q, want 200", status, msg)
	}
	for _, body := range []string{`{"all":true,"soft":true}`, `{"urls":["/a"],"soft":true}`, `{"urls":["/a"]}`} {
		if status, _, _ := ps.post(t, "", token, body); status != http.StatusTooManyRequests {
			t.Fatalf("%s right after a soft purge of everything: %d, want 429", body, status)
		}
	}
	if got := ps.count(ResultUnauthorized); got != 2 {
		t.Errorf("unauthorized purges counted %d, want 2", got)
	}
}

func TestASoftPurgeAnswerSaysItIsSoftAndCountsPerLayer(t *testing.T) {
	p, cache, c := newPurger(t, "")
	put(t, cache, "http", "a.example", "/a")
	put(t, cache, "https", "a.example", "/a")
	ps := newPurgeServer(t, p, c, nil)
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"urls":["/a"],"soft":true}`, `{"purged":2,"l1":2,"bodies":0,"soft":true}`},
		{`{"urls":["/a"]}`, `{"purged":2,"l1":2,"bodies":0,"soft":false}`},
		{`{"urls":["/a"]}`, `{"purged":0,"l1":0,"bodies":0,"soft":false}`},
	} {
		res, err := http.Post(ps.url, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var got, want map[string]any
		err = json.NewDecoder(res.Body).Decode(&got)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if res.StatusCode != http.StatusOK || string(gb) != string(wb) {
			t.Errorf("%s: %d %s, want 200 %s", tc.body, res.StatusCode, gb, wb)
		}
	}
}

func TestASoftPurgeMarksAStoredPartialResponse(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	key := string(cachekey.AppendPrimary(nil, "http", "a.example", "/video"))
	part := &entry.Entry{Kind: entry.KindPartial, Host: "a.example", Target: "/video", Status: 200,
		Partial: &entry.Partial{Length: 100, Spans: []entry.Span{{Start: 0, End: 9}}},
		Body:    []byte("0123456789"), ResponseTime: time.Now(), Lifetime: time.Hour}
	if err := cache.Set(key, part); err != nil {
		t.Fatal(err)
	}
	res, err := p.Purge(context.Background(), Request{URLs: []string{"/video"}, Soft: true})
	if err != nil || res.L1 != 1 || res.Purged != 1 {
		t.Fatalf("answer %+v, %v; want the part counted", res, err)
	}
	got, err := cache.Get(key)
	if err != nil || got.Kind != entry.KindPartial || got.FreshUntil().After(time.Now()) || string(got.Body) != "0123456789" {
		t.Fatalf("after the soft purge the part is %+v (%v); want it kept, stale", got, err)
	}
}
