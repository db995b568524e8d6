package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tiercache/tiercache/internal/controlplane"
)

func version(c byte) string { return strings.Repeat(string(c), 64) }

func TestTopVersions(t *testing.T) {
	cases := map[string]struct {
		in   map[string]int
		n    int
		want map[string]int
	}{
		"versions are shortened to 12 hex digits": {
			in: map[string]int{version('a'): 2}, n: 8, want: map[string]int{version('a')[:12]: 2},
		},
		"versions that shorten alike add up": {
			in: map[string]int{version('a'): 2, version('a')[:20]: 1}, n: 8, want: map[string]int{version('a')[:12]: 3},
		},
		"the most common are kept, a tie goes to the smaller version": {
			in: map[string]int{version('a'): 1, version('b'): 5, version('c'): 1, version('d'): 3}, n: 3,
			want: map[string]int{version('b')[:12]: 5, version('d')[:12]: 3, version('a')[:12]: 1},
		},
		"the unknown version is kept as such": {
			in: map[string]int{"": 2}, n: 8, want: map[string]int{"": 2},
		},
		"zero counts are dropped": {
			in: map[string]int{version('a'): 0, version('b'): 1}, n: 8, want: map[string]int{version('b')[:12]: 1},
		},
		"nothing is nil": {in: map[string]int{}, n: 8, want: nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := topVersions(c.in, c.n); !maps.Equal(got, c.want) || (got == nil) != (c.want == nil) {
				t.Errorf("topVersions = %v, want %v", got, c.want)
			}
		})
	}
}

// TestAReportStaysUnderItsBound: however many tiers a replica serves, its
// report fits in a Lease annotation; the tiers left out are counted.
func TestAReportStaysUnderItsBound(t *testing.T) {
	tiers := map[string]controlplane.Sidecars{}
	for i := range 5000 {
		tiers[fmt.Sprintf("namespace-%04d/%s", i, strings.Repeat("t", 50))] = controlplane.Sidecars{
			Connected: 3, Applied: map[string]int{version('a'): 2, version('b'): 1},
		}
	}
	b, omitted, err := encodeReport(tiers, maxReportBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxReportBytes {
		t.Fatalf("the report takes %d bytes, more than %d", len(b), maxReportBytes)
	}
	rep, err := decodeReport(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Omitted == 0 || rep.Omitted != omitted || len(rep.Tiers)+rep.Omitted != len(tiers) {
		t.Fatalf("%d tiers reported, %d omitted, of %d", len(rep.Tiers), rep.Omitted, len(tiers))
	}
	// The first tiers in key order are the ones kept.
	first := fmt.Sprintf("namespace-%04d/%s", 0, strings.Repeat("t", 50))
	last := fmt.Sprintf("namespace-%04d/%s", len(rep.Tiers)-1, strings.Repeat("t", 50))
	if _, ok := rep.Tiers[first]; !ok {
		t.Errorf("the first tier in key order was left out")
	}
	if got := rep.Tiers[last]; got.Connected != 3 || !maps.Equal(got.Applied, map[string]int{version('a')[:12]: 2, version('b')[:12]: 1}) {
		t.Errorf("tier %s reported as %+v", last, got)
	}
	// Under the bound nothing is left out.
	small := map[string]controlplane.Sidecars{first: tiers[first]}
	if b, n, _ := encodeReport(small, maxReportBytes); n != 0 || strings.Contains(string(b), "omitted") {
		t.Errorf("a small report says %s", b)
	}
}

// TestAReportBoundsWhatSidecarsSend: the reason of a NACK and the node
// come from a sidecar; versions are many during a long rollout. None of
// it makes a tier's entry large.
func TestAReportBoundsWhatSidecarsSend(t *testing.T) {
	applied := map[string]int{}
	rejected := map[string]int{}
	for i := range 50 {
		v := fmt.Sprintf("%012x%s", i, strings.Repeat("f", 52))
		applied[v] = i + 1
		rejected[v] = 1
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, _, err := encodeReport(map[string]controlplane.Sidecars{"shop/web": {
		Connected: 1000, Applied: applied, Rejected: rejected,
		NACKs: controlplane.NACKStats{Total: 7, Last: controlplane.NACK{Version: version('c'), Node: "shop/" + strings.Repeat("n", 1000), Message: strings.Repeat("m", 100_000), At: at}},
	}}, maxReportBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 2000 {
		t.Errorf("one tier's report takes %d bytes", len(b))
	}
	rep, err := decodeReport(string(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := rep.Tiers["shop/web"]
	if len(tr.Applied) != reportVersions || len(tr.Rejected) != reportRejected {
		t.Errorf("%d applied and %d rejected versions reported, want %d and %d", len(tr.Applied), len(tr.Rejected), reportVersions, reportRejected)
	}
	if tr.Applied[fmt.Sprintf("%012x", 49)] != 50 {
		t.Errorf("the most common version is not reported: %v", tr.Applied)
	}
	l := tr.LastNACK
	if tr.NACKs != 7 || l == nil || l.Version != version('c')[:12] || len(l.Message) > maxNACKMessage || len(l.Node) > 253 || !l.At.Equal(at) {
		t.Errorf("NACKs %d, last %+v", tr.NACKs, l)
	}
}

func TestDecodeReportRefusesWhatIsNoReport(t *testing.T) {
	for name, in := range map[string]string{
		"a missing annotation (an older replica's report)": "",
		"per-tier totals (an older replica's format)":      `{"shop/web":3}`,
		"text": "not json",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := decodeReport(in); err == nil || !strings.Contains(err.Error(), annotationSidecars) {
				t.Errorf("decodeReport(%q) error %v, want one naming %s", in, err, annotationSidecars)
			}
		})
	}
}

// TestAReportChangeWakesOnlyTheTiersItChanges: a replica rewrites its
// report every period; the leader reconciles only the tiers whose entry
// changed (all of them when a report appears or goes).
func TestAReportChangeWakesOnlyTheTiersItChanges(t *testing.T) {
	s := newSidecarReports(nil, nil, operatorNS, time.Second, nil)
	lease := func(rv string, tiers map[string]controlplane.Sidecars) *coordinationv1.Lease {
		b, _, err := encodeReport(tiers, maxReportBytes)
		if err != nil {
			t.Fatal(err)
		}
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Namespace: operatorNS, Name: "tiercache-connected-a", UID: types.UID("uid-a"), ResourceVersion: rv,
			Annotations: map[string]string{annotationSidecars: string(b)},
		}}
	}
	one := controlplane.Sidecars{Connected: 1, Applied: map[string]int{version('a'): 1}}
	two := controlplane.Sidecars{Connected: 2, Applied: map[string]int{version('a'): 2}}
	before := lease("1", map[string]controlplane.Sidecars{"shop/same": one, "shop/moved": one, "shop/gone": one})
	after := lease("2", map[string]controlplane.Sidecars{"shop/same": one, "shop/moved": two, "shop/new": one, "bad key": one})

	queued := func(f func(q workqueue.TypedRateLimitingInterface[reconcile.Request])) map[string]bool {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		f(q)
		out := map[string]bool{}
		for q.Len() > 0 {
			r, _ := q.Get()
			out[r.Namespace+"/"+r.Name] = true
			q.Done(r)
		}
		return out
	}
	h := s.handler()
	ctx := context.Background()
	got := queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: before, ObjectNew: after}, q)
	})
	if want := map[string]bool{"shop/moved": true, "shop/gone": true, "shop/new": true}; !maps.Equal(got, want) {
		t.Errorf("an update woke %v, want %v", got, want)
	}
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Create(ctx, event.TypedCreateEvent[client.Object]{Object: before}, q)
	})
	if want := map[string]bool{"shop/same": true, "shop/moved": true, "shop/gone": true}; !maps.Equal(got, want) {
		t.Errorf("a new report woke %v, want %v", got, want)
	}
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Delete(ctx, event.TypedDeleteEvent[client.Object]{Object: after}, q)
	})
	if want := map[string]bool{"shop/same": true, "shop/moved": true, "shop/new": true}; !maps.Equal(got, want) {
		t.Errorf("a deleted report woke %v, want %v", got, want)
	}
	// A renewal alone (same entries, new resourceVersion) wakes nothing.
	renewed := after.DeepCopy()
	renewed.ResourceVersion = "3"
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: after, ObjectNew: renewed}, q)
	})
	if len(got) != 0 {
		t.Errorf("a renewal woke %v", got)
	}
}

// The report's JSON is a contract between replicas of different versions
// during an upgrade: its field names stay.
func TestReportFieldNames(t *testing.T) {
	b, err := json.Marshal(sidecarReport{Tiers: map[string]tierReport{"shop/web": {
		Connected: 2, Applied: map[string]int{"a": 1}, Rejected: map[string]int{"b": 1}, NACKs: 1,
		LastNACK: &nackReport{Version: "b", Node: "shop/web-0", Message: "no", At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}}, Omitted: 1})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"tiers":{"shop/web":{"n":2,"a":{"a":1},"r":{"b":1},"nacks":1,"last":{"v":"b","node":"shop/web-0","msg":"no","at":"2026-01-01T00:00:00Z"}}},"omitted":1}`
	if string(b) != want {
		t.Errorf("report JSON\n got %s\nwant %s", b, want)
	}
}
