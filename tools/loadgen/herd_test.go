package main

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestHerdBandsHaveTheDocumentedSizes(t *testing.T) {
	h, err := NewHerd(HerdConfig{Base: "http://127.0.0.1:8080/", Keys: 10000, Size: 1024, TTL: 1, SWR: 86400})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		first int
		count int
	}{{"hot", 0, 50}, {"warm", 50, 450}, {"cool", 500, 4500}, {"missing", 5000, 5000}}
	for i, w := range want {
		b := h.Bands[i]
		if b.Name != w.name || b.First != w.first || b.Count != w.count {
			t.Errorf("band %d = %+v, want %+v", i, b, w)
		}
	}
	if len(h.Targets) != 10000 {
		t.Fatalf("%d targets, want 10000", len(h.Targets))
	}
	if got := h.Targets[7].URL; got != "http://127.0.0.1:8080/bytes/7?size=1024&ttl=1&swr=86400" {
		t.Errorf("target 7 = %q", got)
	}
	if got := h.Targets[9999]; got.URL != "http://127.0.0.1:8080/missing/9999" || !got.Missing {
		t.Errorf("target 9999 = %+v", got)
	}
}

func TestHerdRequestsHitTheirBandsInProportion(t *testing.T) {
	h, err := NewHerd(HerdConfig{Base: "http://127.0.0.1:8080", Keys: 10000, Size: 1024})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400_000
	r := rand.New(rand.NewPCG(42, 0))
	perBand := map[string]int{}
	perKey := make([]int, len(h.Targets))
	for range n {
		k := h.Choose(r)
		perKey[k]++
		perBand[h.BandOf(k).Name]++
	}
	for _, b := range h.Bands {
		got := float64(perBand[b.Name]) / n
		// 5 standard deviations of a binomial proportion.
		tol := 5 * math.Sqrt(b.Share*(1-b.Share)/n)
		if math.Abs(got-b.Share) > tol {
			t.Errorf("band %s got %.4f of requests, want %.4f ± %.4f", b.Name, got, b.Share, tol)
		}
	}
	// Uniform within a band: every hot key gets close to its 1/50 of 80%.
	hot := h.Bands[0]
	mean := hot.Share * n / float64(hot.Count)
	for k := hot.First; k < hot.First+hot.Count; k++ {
		if math.Abs(float64(perKey[k])-mean) > 5*math.Sqrt(mean) {
			t.Errorf("hot key %d got %d requests, want about %.0f", k, perKey[k], mean)
		}
	}
}

func TestHerdRefusesBadConfigs(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  HerdConfig
		want string
	}{
		{"a remote base URL is refused", HerdConfig{Base: "http://10.0.0.1:8080", Keys: 10000}, "loopback"},
		{"too few keys leave a band empty", HerdConfig{Base: "http://127.0.0.1:8080", Keys: 10}, "--keys"},
		{"a negative size is refused", HerdConfig{Base: "http://127.0.0.1:8080", Keys: 1000, Size: -1}, "--size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewHerd(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
