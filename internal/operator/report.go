package operator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// Sidecars connect to whichever operator replica the xDS Service picks,
// so no replica sees them all, and only the leader writes status. Each
// replica therefore reports what its own control plane knows (per tier:
// connected sidecars by the version they hold, by the version they
// refused, and NACKs) in a Lease of its own in the operator's namespace,
// tiercache-connected-<replica>, as the JSON annotation
// tiercache.io/sidecars; the leader adds up the reports that have not
// expired (see reports.go). The format below is that annotation's.
const (
	labelConnectedReport = "tiercache.io/connected-report"
	annotationSidecars   = "tiercache.io/sidecars"
	// annotationConnected held the per-tier totals of earlier versions;
	// a report removes it.
	annotationConnected  = "tiercache.io/connected"
	connectedLeasePrefix = "tiercache-connected-"

	// maxReportBytes keeps a report well under the API server's 256 KiB
	// limit on an object's annotations: tiers that do not fit (in key
	// order) are left out and counted in omitted. A tier takes about 100
	// bytes with one version, so that is some 2,000 tiers with sidecars
	// on one replica.
	maxReportBytes = 200 << 10
	// reportVersions and reportRejected bound the versions reported per
	// tier (the most common; sidecars on others count as behind).
	reportVersions = 8
	reportRejected = 4
	// shortVersion is how many hex digits of a version travel: enough to
	// tell a tier's versions apart.
	shortVersion = 12
	// maxNACKMessage bounds the reason of the last NACK in a report.
	maxNACKMessage = 256
)

// sidecarReport is one replica's report.
type sidecarReport struct {
	// Tiers by "<namespace>/<tier>".
	Tiers map[string]tierReport `json:"tiers"`
	// Omitted counts the tiers left out to stay under maxReportBytes.
	Omitted int `json:"omitted,omitempty"`
}

// tierReport is what one replica knows of one tier's sidecars.
type tierReport struct {
	// Connected counts the sidecars with an open stream.
	Connected int `json:"n"`
	// Applied counts them by the version they hold (shortened; "" when
	// unknown); Rejected by the version their latest answer refused.
	Applied  map[string]int `json:"a,omitempty"`
	Rejected map[string]int `json:"r,omitempty"`
	// NACKs heard since the replica started, and the last one.
	NACKs    uint64      `json:"nacks,omitempty"`
	LastNACK *nackReport `json:"last,omitempty"`
}

type nackReport struct {
	Version string    `json:"v"`
	Node    string    `json:"node"`
	Message string    `json:"msg"`
	At      time.Time `json:"at"`
}

// String is the form of status.lastNACK.
func (n *nackReport) String() string {
	return fmt.Sprintf("version %s refused by %s: %s", n.Version, n.Node, n.Message)
}

// newTierReport shortens and bounds what a control plane knows of a tier.
func newTierReport(s controlplane.Sidecars) tierReport {
	r := tierReport{
		Connected: s.Connected,
		Applied:   topVersions(s.Applied, reportVersions),
		Rejected:  topVersions(s.Rejected, reportRejected),
		NACKs:     s.NACKs.Total,
	}
	if s.NACKs.Total > 0 {
		l := s.NACKs.Last
		r.LastNACK = &nackReport{Version: short(l.Version), Node: truncate(l.Node, 253), Message: truncate(l.Message, maxNACKMessage), At: l.At.UTC()}
	}
	return r
}

// topVersions shortens the versions of counts, adding up those that
// shorten alike, and keeps the n most common (ties: the smaller version).
func topVersions(counts map[string]int, n int) map[string]int {
	if len(counts) == 0 {
		return nil
	}
	merged := map[string]int{}
	for v, c := range counts {
		if c > 0 {
			merged[short(v)] += c
		}
	}
	if len(merged) <= n {
		return merged
	}
	keys := slices.SortedFunc(maps.Keys(merged), func(a, b string) int {
		return cmp.Or(cmp.Compare(merged[b], merged[a]), cmp.Compare(a, b))
	})
	out := make(map[string]int, n)
	for _, v := range keys[:n] {
		out[v] = merged[v]
	}
	return out
}

func short(v string) string {
	if len(v) > shortVersion {
		return v[:shortVersion]
	}
	return v
}

// encodeReport renders a replica's control-plane view as its report,
// leaving out (in key order) the tiers that would take it past maxBytes;
// omitted counts them.
func encodeReport(tiers map[string]controlplane.Sidecars, maxBytes int) (body []byte, omitted int, err error) {
	rep := sidecarReport{Tiers: make(map[string]tierReport, len(tiers))}
	size := len(`{"tiers":{},"omitted":}`) + 20
	for _, key := range slices.Sorted(maps.Keys(tiers)) {
		tr := newTierReport(tiers[key])
		b, err := json.Marshal(tr)
		if err != nil {
			return nil, 0, err
		}
		// "key":{...},
		n := len(key) + len(b) + 4
		if size+n > maxBytes {
			rep.Omitted++
			continue
		}
		size += n
		rep.Tiers[key] = tr
	}
	body, err = json.Marshal(rep)
	return body, rep.Omitted, err
}

// decodeReport parses a report annotation.
func decodeReport(s string) (sidecarReport, error) {
	var rep sidecarReport
	if s == "" {
		return rep, fmt.Errorf("annotation %s: missing", annotationSidecars)
	}
	if err := json.Unmarshal([]byte(s), &rep); err != nil {
		return rep, fmt.Errorf("annotation %s: %w", annotationSidecars, err)
	}
	if rep.Tiers == nil {
		return rep, fmt.Errorf("annotation %s: no tiers object", annotationSidecars)
	}
	return rep, nil
}
