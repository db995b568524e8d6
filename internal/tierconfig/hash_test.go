package tierconfig

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func loadExample(t *testing.T) Config {
	t.Helper()
	c, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHashIsStable(t *testing.T) {
	a, b := loadExample(t), loadExample(t)
	if a.Hash() != b.Hash() {
		t.Fatal("two parses of one file hash differently")
	}
	if h := a.Hash(); len(h) != 64 || h != a.Hash() {
		t.Fatalf("Hash() = %q, want 64 stable hex digits", h)
	}
	// The wire form parses back to a config with the same hash.
	wire, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(wire)
	if err != nil {
		t.Fatalf("Parse(json.Marshal(c)): %v", err)
	}
	if back.Hash() != a.Hash() {
		t.Fatalf("the JSON wire form %s hashes differently after a round trip", wire)
	}
}

func TestDefaultWireForm(t *testing.T) {
	// The JSON the operator pushes and the hash is taken of: sizes and
	// durations as canonical strings.
	const want = `{"l1":{"maxSize":"256Mi","maxEntrySize":"1Mi","shards":256},"l2":{},` +
		`"origin":{"timeout":"30s","responseHeaderTimeout":"1m0s","idleTimeout":"1m0s"},"defaults":{"fallbackTTL":"0s","staleWhileRevalidate":"0s",` +
		`"staleIfError":"0s","negativeTTL":"0s","heuristicFraction":0.1,"heuristicMaxTTL":"24h0m0s",` +
		`"hitForMissTTL":"2m0s"},"coalescing":{"enabled":true,"timeout":"10s"},"purge":{}}`
	got, err := json.Marshal(Default())
	if err != nil || string(got) != want {
		t.Fatalf("json.Marshal(Default()) =\n%s, %v\nwant\n%s", got, err, want)
	}
}

func TestSpellingsOfOneConfigHashEqual(t *testing.T) {
	yamlDoc := `
# comments do not count
rules:
  - name: api
    match: {pathPrefix: /api/}
    ttl: 90m
    cacheKey:
      queryExclude: [utm_*]
l1:
  maxSize: 1Gi
  maxEntrySize: 1024Ki
`
	jsonDoc := `{
	  "l1": {"maxEntrySize": 1048576, "maxSize": "1024Mi", "shards": 256},
	  "rules": [{"cacheKey": {"queryExclude": ["utm_*"]}, "ttl": "1h30m", "match": {"pathPrefix": "/api/"}, "name": "api"}],
	  "defaults": {"heuristicFraction": 0.1, "hitForMissTTL": "120s"}
	}`
	y, err := Parse([]byte(yamlDoc))
	if err != nil {
		t.Fatal(err)
	}
	j, err := Parse([]byte(jsonDoc))
	if err != nil {
		t.Fatal(err)
	}
	if y.Hash() != j.Hash() {
		a, _ := json.Marshal(y)
		b, _ := json.Marshal(j)
		t.Fatalf("YAML and JSON spellings hash differently:\n%s\n%s", a, b)
	}
}

// loadExampleWithVersions is the example with the secret versions the
// operator adds (a --config file has none).
func loadExampleWithVersions(t *testing.T) Config {
	c := loadExample(t)
	c.SecretVersions = map[string]string{"redis-password": "redis/password@41", "purge-token": "shop-tiercache/purge-token@42"}
	return c
}

func TestEveryFieldChangesTheHash(t *testing.T) {
	base := loadExampleWithVersions(t)
	baseHash := base.Hash()
	n := countLeaves(reflect.ValueOf(&base).Elem())
	if n < 40 {
		t.Fatalf("found only %d fields in the example; the walk is broken", n)
	}
	for i := range n {
		c := loadExampleWithVersions(t)
		var path string
		mutateLeaf(reflect.ValueOf(&c).Elem(), "", new(int), i, &path)
		if c.Hash() == baseHash {
			t.Errorf("changing %s does not change the hash", path)
		}
	}
	// Nil and false are different configs too.
	c := loadExample(t)
	c.Coalescing.ClusterWide = nil
	if c.Hash() == baseHash {
		t.Error("unsetting coalescing.clusterWide does not change the hash")
	}
}

func countLeaves(v reflect.Value) int {
	var n int
	mutateLeaf(v, "", &n, -1, new(string))
	return n
}

// mutateLeaf walks v's leaves (scalars and slice elements) in order,
// counting them in *n, and changes the one numbered target, recording its
// path.
func mutateLeaf(v reflect.Value, path string, n *int, target int, got *string) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			mutateLeaf(v.Field(i), path+"."+v.Type().Field(i).Name, n, target, got)
		}
		return
	case reflect.Pointer:
		if !v.IsNil() {
			mutateLeaf(v.Elem(), path, n, target, got)
		}
		return
	case reflect.Slice:
		for i := range v.Len() {
			mutateLeaf(v.Index(i), path+"[]", n, target, got)
		}
		return
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			if *n == target {
				*got = path + "[" + k.String() + "]"
				v.SetMapIndex(k, reflect.ValueOf(v.MapIndex(k).String()+"x"))
			}
			*n++
		}
		return
	}
	if *n == target {
		*got = path
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int, reflect.Int32, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Float64:
			v.SetFloat(v.Float() + 0.01)
		default:
			panic("unhandled kind " + v.Kind().String() + " at " + path)
		}
	}
	*n++
}

func TestExampleFileIsCanonicalAfterParse(t *testing.T) {
	// Writing the parsed example back out as JSON and parsing that gives
	// an equal config: the wire form loses nothing.
	c := loadExample(t)
	wire, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "wire.json")
	if err := os.WriteFile(path, wire, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v", back, c)
	}
}

func TestHashOfAnUnmarshalableConfigIsStillStable(t *testing.T) {
	c := Default()
	c.Defaults.HeuristicFraction = math.NaN()
	first, second := c.Hash(), c.Hash()
	if first != second || first == Default().Hash() {
		t.Fatal("a NaN heuristicFraction must hash stably and unlike the default")
	}
}
