package controlplane

import (
	"context"
	"errors"
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// tierCache is the SotW config watcher behind the ADS server: one snapshot
// (one resource, one version) per tier, watches keyed by the node's
// cluster. See the package comment for why it replaces the stock snapshot
// cache.
type tierCache struct {
	mu     sync.Mutex
	tiers  map[string]*tierState
	nextID int64
}

type tierState struct {
	// name and version of the published resource; resource is nil when
	// nothing is published (never, or cleared).
	name     string
	version  string
	resource *anypb.Any
	// watches wait for a version other than the one they know.
	watches map[int64]tierWatch
}

type tierWatch struct {
	req *discoveryv3.DiscoveryRequest
	sub cachev3.Subscription
	// known is the version the client has: what it ACKed, or what it
	// NACKed, so a rejected version is never sent to it again.
	known string
	ch    chan cachev3.Response
}

var _ cachev3.Cache = (*tierCache)(nil)

func newTierCache() *tierCache { return &tierCache{tiers: make(map[string]*tierState)} }

// set publishes resource under version for tier, answering every watch of
// the tier that does not know that version. It reports false when the tier
// already has that version.
func (c *tierCache) set(tier, name, version string, resource *anypb.Any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tierLocked(tier)
	if t.resource != nil && t.version == version && t.name == name {
		return false
	}
	t.name, t.version, t.resource = name, version, resource
	for id, w := range t.watches {
		if t.shouldRespond(w) {
			t.respond(w)
			delete(t.watches, id)
		}
	}
	return true
}

// tierLocked returns tier's state, creating it; c.mu must be held.
func (c *tierCache) tierLocked(tier string) *tierState {
	t := c.tiers[tier]
	if t == nil {
		t = &tierState{watches: make(map[int64]tierWatch)}
		c.tiers[tier] = t
	}
	return t
}

// version returns the published version of tier, or "".
func (c *tierCache) version(tier string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tiers[tier]; t != nil && t.resource != nil {
		return t.version
	}
	return ""
}

// clear withdraws the tier's resource. Open watches stay: they are answered
// if the tier is published again. Clients keep what they have (nothing is
// sent to them).
func (c *tierCache) clear(tier string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tiers[tier]
	if t == nil {
		return
	}
	t.name, t.version, t.resource = "", "", nil
	if len(t.watches) == 0 {
		delete(c.tiers, tier)
	}
}

// CreateWatch answers at once when the tier has a version the client does
// not know (or the resource was not yet sent on this stream); otherwise it
// parks the watch until set publishes a new version.
func (c *tierCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() != ResourceTypeURL {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported resource type %q: this server serves only %q", req.GetTypeUrl(), ResourceTypeURL)
	}
	tier := req.GetNode().GetCluster()
	if err := ValidateTierKey(tier); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "node.cluster: %v", err)
	}
	w := tierWatch{req: req, sub: sub, known: req.GetVersionInfo(), ch: ch}
	if req.GetErrorDetail() != nil {
		// A NACK carries the last version the client accepted; the one
		// it rejected is what this stream last returned. Remember that
		// one, or the watch would be answered with it at once, forever.
		for _, v := range sub.ReturnedResources() {
			w.known = v
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tierLocked(tier)
	if t.shouldRespond(w) {
		t.respond(w)
		return func() {}, nil
	}
	c.nextID++
	id := c.nextID
	t.watches[id] = w
	return func() { c.cancel(tier, id) }, nil
}

func (c *tierCache) cancel(tier string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tiers[tier]
	if t == nil {
		return
	}
	delete(t.watches, id)
	if len(t.watches) == 0 && t.resource == nil {
		delete(c.tiers, tier)
	}
}

func (t *tierState) shouldRespond(w tierWatch) bool {
	if t.resource == nil || !subscribed(w.sub, t.name) {
		return false
	}
	if t.version != w.known {
		return true
	}
	// Same version: answer only a stream that has not been sent the
	// resource yet (a reconnecting client), so it holds it on this stream.
	_, returned := w.sub.ReturnedResources()[t.name]
	return !returned
}

func subscribed(sub cachev3.Subscription, name string) bool {
	if sub.IsWildcard() {
		return true
	}
	_, ok := sub.SubscribedResources()[name]
	return ok
}

// respond sends the tier's resource on w's channel. The server gives each
// watch a fresh channel with room for one response and cancels it before
// making the next, so the send cannot block; the default case only guards
// against a server that changed that contract.
func (t *tierState) respond(w tierWatch) {
	resp := &cachev3.PassthroughResponse{
		Request: w.req,
		// A response per watch: the server writes the nonce into it.
		DiscoveryResponse: &discoveryv3.DiscoveryResponse{
			VersionInfo: t.version,
			Resources:   []*anypb.Any{t.resource},
			TypeUrl:     ResourceTypeURL,
		},
		ReturnedResources: map[string]string{t.name: t.version},
	}
	select {
	case w.ch <- resp:
	default:
	}
}

// CreateDeltaWatch refuses: Tiercache speaks SotW only.
func (c *tierCache) CreateDeltaWatch(*cachev3.DeltaRequest, cachev3.Subscription, chan cachev3.DeltaResponse) (func(), error) {
	return nil, status.Error(codes.Unimplemented, "delta xDS is not supported: use SotW ADS")
}

// Fetch refuses: Tiercache serves streams only.
func (c *tierCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("fetch is not supported: use SotW ADS")
}
