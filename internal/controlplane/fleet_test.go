package controlplane

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// fleet is one Server and tiers×perTier sidecars, each tier's config
// applied.
type fleet struct {
	srv      *testServer
	tiers    []string
	sidecars [][]*testSidecar
	// notify[i] receives every config applied by a sidecar of tiers[i].
	notify []chan applied
}

func startFleet(tb testing.TB, tiers, perTier int) *fleet {
	tb.Helper()
	f := &fleet{srv: startServer(tb, "127.0.0.1:0", Options{})}
	for i := range tiers {
		tier := fmt.Sprintf("tier-%02d", i)
		f.tiers = append(f.tiers, "ns/"+tier)
		f.notify = append(f.notify, make(chan applied, 4*perTier))
		publish(tb, f.srv, "ns/"+tier, i+1)
		var scs []*testSidecar
		for j := range perTier {
			scs = append(scs, startSidecar(tb, f.srv.addr, "ns", tier, fmt.Sprintf("%s-%d", tier, j), f.notify[i]))
		}
		f.sidecars = append(f.sidecars, scs)
	}
	for i := range f.tiers {
		f.await(tb, i, f.srv.Version(f.tiers[i]), time.Now())
	}
	return f
}

// await waits for every sidecar of tier i to apply version and returns
// how long after start each did.
func (f *fleet) await(tb testing.TB, i int, version string, start time.Time) []time.Duration {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	var lat []time.Duration
	for len(lat) < len(f.sidecars[i]) {
		select {
		case a := <-f.notify[i]:
			if a.version != version {
				tb.Fatalf("a sidecar of %s applied %s, want %s", f.tiers[i], a.version, version)
			}
			lat = append(lat, a.at.Sub(start))
		case <-timeout:
			tb.Fatalf("%d of %d sidecars of %s applied %s", len(lat), len(f.sidecars[i]), f.tiers[i], version)
		}
	}
	return lat
}

func TestEditReachesExactlyItsTier(t *testing.T) {
	if testing.Short() {
		t.Skip("200 sidecars")
	}
	const tiers, perTier, edited = 20, 10, 7
	f := startFleet(t, tiers, perTier)
	for i := range f.tiers {
		if n := f.srv.Connected(f.tiers[i]); n != perTier {
			t.Fatalf("%s has %d connected sidecars, want %d", f.tiers[i], n, perTier)
		}
	}

	v := publish(t, f.srv, f.tiers[edited], 1000)
	f.await(t, edited, v, time.Now())
	// Give a stray response time to arrive before counting.
	time.Sleep(300 * time.Millisecond)
	for i, scs := range f.sidecars {
		want := uint64(1)
		if i == edited {
			want = 2
		}
		for j, sc := range scs {
			if st := sc.State(); st.Responses != want || st.NACKs != 0 {
				t.Errorf("sidecar %d of %s: %d responses %d NACKs, want %d and 0", j, f.tiers[i], st.Responses, st.NACKs, want)
			}
		}
		if i != edited && len(f.notify[i]) != 0 {
			t.Errorf("%s applied %d configs after an edit of %s", f.tiers[i], len(f.notify[i]), f.tiers[edited])
		}
	}
}

// BenchmarkPropagation200Sidecars edits one tier per iteration (round
// robin over 20 tiers of 10 sidecars, all connected) and waits until all
// 10 sidecars applied it. It reports the Publish→Apply latency of single
// sidecars: p50-ms, p99-ms and max-ms over all deliveries.
func BenchmarkPropagation200Sidecars(b *testing.B) {
	const tiers, perTier = 20, 10
	f := startFleet(b, tiers, perTier)
	var lat []time.Duration
	n := 0
	for b.Loop() {
		i := n % tiers
		start := time.Now()
		v := publish(b, f.srv, f.tiers[i], 1000+n)
		lat = append(lat, f.await(b, i, v, start)...)
		n++
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "max-ms")
}
