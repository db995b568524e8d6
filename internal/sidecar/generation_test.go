package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestARetiredGenerationIsIdleOnlyAfterItsLastRequest(t *testing.T) {
	dp := &dataPlane{}
	old := &generation{idle: make(chan struct{})}
	dp.cur.Store(old)
	inFlight := dp.acquire()
	if inFlight != old {
		t.Fatal("acquire did not return the current generation")
	}

	next := &generation{idle: make(chan struct{})}
	dp.cur.Store(next)
	old.retire()
	if got := dp.acquire(); got != next {
		t.Fatal("a request after the swap got the retired generation")
	} else {
		got.release()
	}
	select {
	case <-old.idle:
		t.Fatal("the retired generation is idle while a request still uses it")
	default:
	}
	inFlight.release()
	select {
	case <-old.idle:
	default:
		t.Fatal("the retired generation is not idle after its last request")
	}
	select {
	case <-next.idle:
		t.Fatal("the current generation is idle")
	default:
	}
}

func TestTheL2ConnectionIsTheSameUnlessAConnectionSettingChanged(t *testing.T) {
	base := tierconfig.L2{Addresses: []string{"r:6379"}, Mode: "standalone", Password: "pw", Timeout: tierconfig.Duration(5e7)}
	with := func(f func(*tierconfig.L2)) tierconfig.L2 {
		c := base
		c.Addresses = append([]string(nil), base.Addresses...)
		f(&c)
		return c
	}
	cases := map[string]struct {
		a, b tierconfig.L2
		same bool
	}{
		"no L2 on either side":            {tierconfig.L2{}, tierconfig.L2{Password: "from-env"}, true},
		"an equal config":                 {base, with(func(*tierconfig.L2) {}), true},
		"warm-start settings only":        {base, with(func(c *tierconfig.L2) { c.WarmStart.MaxEntries = 7 }), true},
		"L2 switched on":                  {tierconfig.L2{}, base, false},
		"another address":                 {base, with(func(c *tierconfig.L2) { c.Addresses[0] = "s:6379" }), false},
		"a rotated password":              {base, with(func(c *tierconfig.L2) { c.Password = "new" }), false},
		"TLS switched on":                 {base, with(func(c *tierconfig.L2) { c.TLS = true }), false},
		"another CA bundle":               {base, with(func(c *tierconfig.L2) { c.CACert = "pem" }), false},
		"another key prefix":              {base, with(func(c *tierconfig.L2) { c.KeyPrefix = "tc:x/y:" }), false},
		"another timeout":                 {base, with(func(c *tierconfig.L2) { c.Timeout *= 2 }), false},
		"another user":                    {base, with(func(c *tierconfig.L2) { c.Username = "u" }), false},
		"sentinel instead of standalone":  {base, with(func(c *tierconfig.L2) { c.Mode, c.MasterName = "sentinel", "m" }), false},
		"one more address (cluster mode)": {base, with(func(c *tierconfig.L2) { c.Addresses = append(c.Addresses, "s:6379") }), false},
	}
	for name, c := range cases {
		if got := sameL2(c.a, c.b); got != c.same {
			t.Errorf("%s: sameL2 = %v, want %v", name, got, c.same)
		}
	}
}

// nopLocal is an empty L1 for purgers that only count.
type nopLocal struct{}

func (nopLocal) Delete(string)                                {}
func (nopLocal) DeleteMatching(func(e *entry.Entry) bool) int { return 0 }
func (nopLocal) Reset()                                       {}

func TestThePurgeEpochCountsEveryPurgerAndNeverGoesDown(t *testing.T) {
	compiled, err := tierconfig.Compile(tierconfig.Default())
	if err != nil {
		t.Fatal(err)
	}
	holder := tierconfig.NewHolder(compiled)
	purge := func(p *invalidate.Purger) {
		p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "h", Path: "/x"}})
	}
	var e purgeEpoch
	old, next := invalidate.NewPurger(nopLocal{}, holder), invalidate.NewPurger(nopLocal{}, holder)
	e.add(old)
	purge(old)
	before := e.sum()
	e.add(next)
	if got := e.sum(); got != before {
		t.Fatalf("adding a purger moved the epoch from %d to %d", before, got)
	}
	// A fill on the old generation sees a purge made through the new one.
	purge(next)
	if got := e.sum(); got == before {
		t.Fatal("a purge through the new generation did not move the epoch")
	}
	before = e.sum()
	e.retire(old)
	if got := e.sum(); got != before {
		t.Fatalf("retiring an idle purger moved the epoch from %d to %d", before, got)
	}
	e.retire(old) // twice is harmless
	purge(next)
	if got := e.sum(); got != before+1 {
		t.Fatalf("epoch %d after one more purge, want %d", got, before+1)
	}
}

// BenchmarkServeThroughGenerations is the cost the generation wrapper
// adds to every request (acquire, release) around a handler that does
// nothing.
func BenchmarkServeThroughGenerations(b *testing.B) {
	dp := &dataPlane{}
	g := &generation{idle: make(chan struct{})}
	dp.cur.Store(g)
	var nop http.HandlerFunc = func(http.ResponseWriter, *http.Request) {}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g := dp.acquire()
			nop(nil, r)
			g.release()
		}
	})
}
