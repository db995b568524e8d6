package bodystore

import (
	"errors"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
)

// stored is a body put by putAs: its key, identity and reference.
type stored struct {
	key, host, target string
	tags              []string
	ref               entry.BodyFile
}

// putAs stores a small body under key whose entry has the given identity.
// The encoded entry handed to Commit is overwritten afterwards, so that an
// index that kept pointing into it would be caught.
func putAs(t *testing.T, s *Store, key, host, target string, tags ...string) stored {
	t.Helper()
	b := body(uint64(len(key)), 2000)
	w, err := s.Create(key, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	var enc []byte
	ref, err := w.Commit(func(ref entry.BodyFile) []byte {
		enc = entry.Encode(nil, &entry.Entry{
			Kind: entry.KindResponse, Host: host, Target: target, Tags: tags, Status: 200,
			ResponseTime: time.Unix(1700000000, 0).UTC(), Lifetime: time.Hour, File: &ref,
		})
		return enc
	})
	if err != nil {
		t.Fatal(err)
	}
	clear(enc)
	return stored{key: key, host: host, target: target, tags: tags, ref: ref}
}

// present reports, for each name, whether s still has its body: on disk
// and in its index.
func present(t *testing.T, s *Store, bodies map[string]stored) map[string]bool {
	t.Helper()
	out := make(map[string]bool, len(bodies))
	for name, b := range bodies {
		bd, err := s.Open(b.key, b.ref)
		switch {
		case err == nil:
			must(t, bd.Close())
			out[name] = true
		case errors.Is(err, fs.ErrNotExist):
			out[name] = false
		default:
			t.Fatalf("Open(%s): %v", name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	indexed := 0
	for _, it := range s.byPrim {
		for ; it != nil; it = it.next {
			indexed++
		}
	}
	if indexed != len(s.items) {
		t.Fatalf("the identity index holds %d bodies, the LRU %d", indexed, len(s.items))
	}
	return out
}

func gone(all []string, names ...string) map[string]bool {
	out := make(map[string]bool, len(all))
	for _, n := range all {
		out[n] = !slices.Contains(names, n)
	}
	return out
}

// variantKey is the key of a variant of prim under nonce, with the
// request's vary values.
func variantKey(prim string, nonce uint64, values string) string {
	return string(cachekey.AppendVariant([]byte(prim), nonce)) + values
}

func TestRemoveKeyFindsBodiesByTheirKeys(t *testing.T) {
	primA := string(cachekey.AppendPrimary(nil, "http", "shop.example", "/a"))
	primAB := string(cachekey.AppendPrimary(nil, "http", "shop.example", "/ab"))
	primV := string(cachekey.AppendPrimary(nil, "https", "shop.example", "/v"))
	fill := func(t *testing.T, s *Store) map[string]stored {
		return map[string]stored{
			"a":      putAs(t, s, primA, "shop.example", "/a"),
			"ab":     putAs(t, s, primAB, "shop.example", "/ab"),
			"v gzip": putAs(t, s, variantKey(primV, 7, "gzip"), "shop.example", "/v"),
			"v br":   putAs(t, s, variantKey(primV, 7, "br"), "shop.example", "/v"),
			"v old":  putAs(t, s, variantKey(primV, 6, "gzip"), "shop.example", "/v"),
		}
	}
	names := []string{"a", "ab", "v gzip", "v br", "v old"}
	cases := map[string]struct {
		key  string
		gone []string
	}{
		"a primary key takes its own body only, not one whose key it prefixes": {primA, []string{"a"}},
		"a primary key takes the bodies of all its variants, old nonces too":   {primV, []string{"v gzip", "v br", "v old"}},
		"a variant key takes that variant's body only":                         {variantKey(primV, 7, "br"), []string{"v br"}},
		"a key without a body takes nothing":                                   {string(cachekey.AppendPrimary(nil, "https", "shop.example", "/a")), nil},
	}
	for name, c := range cases {
		for _, restarted := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: " (bodies recovered at a restart)"}[restarted], func(t *testing.T) {
				s, _ := testStore(t, Options{})
				bodies := fill(t, s)
				if restarted {
					var rec []Recovered
					s, rec, _ = reopen(t, s, 64<<20)
					if len(rec) != len(bodies) {
						t.Fatalf("recovered %d bodies, want %d", len(rec), len(bodies))
					}
				}
				s.RemoveKey(c.key)
				if got, want := present(t, s, bodies), gone(names, c.gone...); !maps.Equal(got, want) {
					t.Fatalf("bodies present after RemoveKey: %v, want %v", got, want)
				}
				if _, n, _ := s.Usage(); n != len(names)-len(c.gone) {
					t.Fatalf("%d files in use, want %d", n, len(names)-len(c.gone))
				}
			})
		}
	}
}

func TestRemoveMatchingSelectsBodiesByTheirEntrysIdentity(t *testing.T) {
	key := func(host, target string) string {
		return string(cachekey.AppendPrimary(nil, "http", host, target))
	}
	fill := func(t *testing.T, s *Store) map[string]stored {
		return map[string]stored{
			"/api/1":     putAs(t, s, key("shop.example", "/api/1"), "shop.example", "/api/1"),
			"/api/2":     putAs(t, s, key("shop.example", "/api/2"), "shop.example", "/api/2", "red"),
			"/tagged":    putAs(t, s, key("shop.example", "/tagged"), "shop.example", "/tagged", "red", "blue"),
			"other/api":  putAs(t, s, key("other.example", "/api/1"), "other.example", "/api/1"),
			"/untouched": putAs(t, s, key("shop.example", "/untouched"), "shop.example", "/untouched", "green"),
		}
	}
	names := []string{"/api/1", "/api/2", "/tagged", "other/api", "/untouched"}
	cases := map[string]struct {
		match func(e *entry.Entry) bool
		gone  []string
	}{
		"a target prefix selects every host's bodies under it": {
			func(e *entry.Entry) bool { return strings.HasPrefix(e.Target, "/api/") },
			[]string{"/api/1", "/api/2", "other/api"}},
		"a host and target select one body": {
			func(e *entry.Entry) bool { return e.Host == "other.example" && e.Target == "/api/1" },
			[]string{"other/api"}},
		"a tag selects every body whose entry carries it": {
			func(e *entry.Entry) bool { return slices.Contains(e.Tags, "blue") },
			[]string{"/tagged"}},
		"a tag shared by two entries selects both": {
			func(e *entry.Entry) bool { return slices.Contains(e.Tags, "red") },
			[]string{"/api/2", "/tagged"}},
		"everything": {func(*entry.Entry) bool { return true }, names},
		"nothing":    {func(*entry.Entry) bool { return false }, nil},
	}
	for name, c := range cases {
		for _, restarted := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: " (bodies recovered at a restart)"}[restarted], func(t *testing.T) {
				s, _ := testStore(t, Options{})
				bodies := fill(t, s)
				if restarted {
					s, _, _ = reopen(t, s, 64<<20)
				}
				ids := map[[16]byte]stored{}
				for _, b := range bodies {
					ids[b.ref.ID] = b
				}
				seen := map[[16]byte]int{}
				n := s.RemoveMatching(func(e *entry.Entry) bool {
					b, ok := ids[e.File.ID]
					if !ok || e.Kind != entry.KindResponse || e.Host != b.host || e.Target != b.target || !slices.Equal(e.Tags, b.tags) {
						t.Errorf("match was given %+v, not the identity of a stored body", e)
					}
					seen[e.File.ID]++
					return c.match(e)
				})
				if len(seen) != len(bodies) || slices.ContainsFunc(slices.Collect(maps.Values(seen)), func(k int) bool { return k != 1 }) {
					t.Errorf("match saw the bodies %v times each, want every one once", seen)
				}
				if n != len(c.gone) {
					t.Errorf("RemoveMatching = %d, want %d", n, len(c.gone))
				}
				if got, want := present(t, s, bodies), gone(names, c.gone...); !maps.Equal(got, want) {
					t.Fatalf("bodies present after RemoveMatching: %v, want %v", got, want)
				}
			})
		}
	}
}

func TestTheIdentityIndexForgetsWhatLeavesTheStore(t *testing.T) {
	const n = 2000
	k := func(target string) string { return string(cachekey.AppendPrimary(nil, "http", "h", target)) }
	s, _ := testStore(t, Options{MaxBytes: 3*fileSize(k("/x"), n) + 500})
	a := putAs(t, s, k("/a"), "h", "/a")
	b := putAs(t, s, k("/b"), "h", "/b")
	c := putAs(t, s, k("/c"), "h", "/c")
	d := putAs(t, s, k("/d"), "h", "/d") // evicts a
	s.Remove(b.ref.ID)
	bodies := map[string]stored{"a": a, "b": b, "c": c, "d": d}
	if got, want := present(t, s, bodies), gone([]string{"a", "b", "c", "d"}, "a", "b"); !maps.Equal(got, want) {
		t.Fatalf("bodies present: %v, want %v", got, want)
	}
	// Neither a key nor a match finds a body that left by eviction or
	// Remove.
	s.RemoveKey(k("/a"))
	if got := s.RemoveMatching(func(e *entry.Entry) bool { return e.Target == "/a" || e.Target == "/b" }); got != 0 {
		t.Fatalf("RemoveMatching found %d bodies that had left", got)
	}
	if _, files, _ := s.Usage(); files != 2 {
		t.Fatalf("%d files, want 2", files)
	}
}
