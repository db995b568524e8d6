package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The browser-mix replay (loadgen replay, make bench part 9): a site's
// traffic as a cache in front of it sees it. Request n of a run is made
// from the seed and n alone (Replay.Request), so a run is the same
// sequence whatever the concurrency: Zipf popularity over a few thousand
// URLs of mixed types on two hosts, each request from one of a population
// of visitors, each visitor a client profile (clients.json: the headers of
// current browsers, crawlers and scripted clients), browsers mostly with
// analytics cookies, some signed in with a session cookie. The origin is
// demo-origin's /site/ route.

//go:embed clients.json
var defaultClients []byte

// ClientProfile is one kind of client: the headers it sends.
type ClientProfile struct {
	Name string `json:"name"`
	// Kind is browser (gets analytics and session cookies), crawler or tool.
	Kind           string  `json:"kind"`
	Weight         float64 `json:"weight"`
	UserAgent      string  `json:"user_agent"`
	AcceptEncoding string  `json:"accept_encoding"`
	// Accept by resource kind (html, json, css, js, image); "default" for
	// the others, */* without it.
	Accept         map[string]string `json:"accept"`
	AcceptLanguage []string          `json:"accept_language"`
}

// LoadClients parses a clients file: {"profiles": [ClientProfile...]}.
func LoadClients(data []byte) ([]ClientProfile, error) {
	var f struct {
		Profiles []ClientProfile `json:"profiles"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	if len(f.Profiles) == 0 {
		return nil, errors.New("clients: no profiles")
	}
	for i, p := range f.Profiles {
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("clients: profiles[%d].name: required", i)
		case p.Kind != "browser" && p.Kind != "crawler" && p.Kind != "tool":
			return nil, fmt.Errorf("clients: profiles[%d].kind: want browser, crawler or tool, got %q", i, p.Kind)
		case !(p.Weight > 0) || math.IsInf(p.Weight, 0):
			return nil, fmt.Errorf("clients: profiles[%d].weight: must be > 0", i)
		case p.UserAgent == "":
			return nil, fmt.Errorf("clients: profiles[%d].user_agent: required", i)
		}
	}
	return f.Profiles, nil
}

// ReplayConfig shapes the workload.
type ReplayConfig struct {
	Seed  uint64
	URLs  int // distinct resources (before query strings)
	Hosts []string
	ZipfS float64 // popularity exponent: weight of rank r is 1/(r+1)^s
	// Visitors is the population requests are drawn from (uniformly).
	Visitors int
	// Analytics is the share of browser visitors with analytics cookies,
	// LoggedIn the share of browser visitors signed in.
	Analytics, LoggedIn float64
	// Campaign is the share of page requests from browsers that carry
	// tracking parameters (utm_*, gclid, fbclid).
	Campaign float64
	Clients  []ClientProfile
}

// DefaultReplayConfig is the workload of make bench part 9.
func DefaultReplayConfig() ReplayConfig {
	return ReplayConfig{Seed: 1, URLs: 3000, Hosts: []string{"www.example.test", "shop.example.test"},
		ZipfS: 0.9, Visitors: 4000, Analytics: 0.8, LoggedIn: 0.15, Campaign: 0.1}
}

func (c ReplayConfig) validate() error {
	share := func(v float64) bool { return v >= 0 && v <= 1 }
	switch {
	case c.URLs < 1 || c.URLs > 1_000_000:
		return errors.New("--urls: must be between 1 and 1000000")
	case len(c.Hosts) == 0:
		return errors.New("--hosts: at least one")
	case !(c.ZipfS > 0) || c.ZipfS > 5:
		return errors.New("--zipf: must be > 0 and <= 5")
	case c.Visitors < 1 || c.Visitors > 10_000_000:
		return errors.New("--visitors: must be between 1 and 10000000")
	case !share(c.Analytics):
		return errors.New("--analytics: must be between 0 and 1")
	case !share(c.LoggedIn):
		return errors.New("--logged-in: must be between 0 and 1")
	case !share(c.Campaign):
		return errors.New("--campaign: must be between 0 and 1")
	case len(c.Clients) == 0:
		return errors.New("no client profiles")
	}
	for _, h := range c.Hosts {
		if !validHost(h) {
			return fmt.Errorf("--hosts: %q is not a host name", h)
		}
	}
	return nil
}

// ReplayRequest is one request of the replay.
type ReplayRequest struct {
	Visitor int
	Profile string
	Host    string
	Path    string // origin-form, query included
	Kind    string // html, json, css, js, image
	// Session is the visitor's session cookie value, "" when signed out.
	Session string
	Header  http.Header
}

// visitor is one member of the population: fixed by the seed.
type visitor struct {
	profile  *ClientProfile
	lang     string
	cookies  []string // analytics cookies, "name=value"
	session  string
	sidIndex int // where the session cookie goes among the others
}

// Replay makes the requests of a replay.
type Replay struct {
	cfg  ReplayConfig
	cdf  []float64 // Zipf over URL ranks
	pcdf []float64 // over profiles, by weight
}

// NewReplay validates cfg and prepares the draws.
func NewReplay(cfg ReplayConfig) (*Replay, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rp := &Replay{cfg: cfg, cdf: make([]float64, cfg.URLs), pcdf: make([]float64, len(cfg.Clients))}
	sum := 0.0
	for r := range rp.cdf {
		sum += 1 / math.Pow(float64(r+1), cfg.ZipfS)
		rp.cdf[r] = sum
	}
	for r := range rp.cdf {
		rp.cdf[r] /= sum
	}
	sum = 0
	for i, p := range cfg.Clients {
		sum += p.Weight
		rp.pcdf[i] = sum
	}
	for i := range rp.pcdf {
		rp.pcdf[i] /= sum
	}
	return rp, nil
}

func pick(cdf []float64, u float64) int {
	return min(sort.SearchFloat64s(cdf, u), len(cdf)-1)
}

// Streams of the seed's random numbers: one per request, one per visitor.
const (
	streamRequest uint64 = 0x5245510000000000
	streamVisitor uint64 = 0x5649530000000000
)

func (rp *Replay) visitor(v int) visitor {
	r := rand.New(rand.NewPCG(rp.cfg.Seed, streamVisitor|uint64(v)))
	p := &rp.cfg.Clients[pick(rp.pcdf, r.Float64())]
	vis := visitor{profile: p}
	if len(p.AcceptLanguage) > 0 {
		vis.lang = p.AcceptLanguage[r.IntN(len(p.AcceptLanguage))]
	}
	if p.Kind != "browser" {
		return vis
	}
	if r.Float64() < rp.cfg.Analytics {
		t := 1_760_000_000 + r.IntN(10_000_000)
		vis.cookies = append(vis.cookies,
			fmt.Sprintf("_ga=GA1.1.%d.%d", r.Uint32(), t),
			fmt.Sprintf("_gid=GA1.1.%d.%d", r.Uint32(), t+r.IntN(86400)))
		if r.IntN(2) == 0 {
			vis.cookies = append(vis.cookies, fmt.Sprintf("_fbp=fb.1.%d%03d.%d", t, r.IntN(1000), r.Uint32()))
		}
		if r.IntN(3) == 0 {
			vis.cookies = append(vis.cookies, fmt.Sprintf("_gcl_au=1.1.%d.%d", r.Uint32(), t))
		}
		if r.IntN(4) == 0 {
			vis.cookies = append(vis.cookies, fmt.Sprintf("_hjSessionUser_%d=eyJpZCI6I%x", 1000000+r.IntN(9000000), r.Uint64()))
		}
	}
	if r.Float64() < rp.cfg.LoggedIn {
		vis.session = fmt.Sprintf("v%d-%016x", v, r.Uint64())
		vis.sidIndex = r.IntN(len(vis.cookies) + 1)
	}
	return vis
}

// resource is URL rank rank: its host, path and kind (query aside).
func (rp *Replay) resource(rank int) (host, path, kind string) {
	x := uint64(rank)*0x9E3779B97F4A7C15 + rp.cfg.Seed
	x ^= x >> 29
	host = rp.cfg.Hosts[int(x%uint64(len(rp.cfg.Hosts)))]
	switch k := (x >> 8) % 100; {
	case k < 30:
		kind = "html"
		if strings.HasPrefix(host, "shop.") {
			path = fmt.Sprintf("/site/products/p%d.html", rank)
		} else {
			path = fmt.Sprintf("/site/articles/a%d.html", rank)
		}
	case k < 45:
		kind, path = "json", fmt.Sprintf("/site/api/items/i%d.json", rank)
	case k < 50:
		kind, path = "css", fmt.Sprintf("/site/static/s%d.css", rank)
	case k < 60:
		kind, path = "js", fmt.Sprintf("/site/static/j%d.js", rank)
	default:
		kind, path = "image", fmt.Sprintf("/site/img/m%d.%s", rank, []string{"jpg", "png", "webp"}[(x>>16)%3])
	}
	return host, path, kind
}

// campaigns are the tracking query strings of links in newsletters and ads.
var campaigns = []string{
	"utm_source=newsletter&utm_medium=email&utm_campaign=winter_sale",
	"utm_source=facebook&utm_medium=social&utm_campaign=launch",
	"utm_source=google&utm_medium=cpc&utm_campaign=brand&utm_term=shoes",
}

// Request is request n of the run.
func (rp *Replay) Request(n uint64) ReplayRequest {
	r := rand.New(rand.NewPCG(rp.cfg.Seed, streamRequest^n))
	v := r.IntN(rp.cfg.Visitors)
	vis := rp.visitor(v)
	rank := pick(rp.cdf, r.Float64())
	host, path, kind := rp.resource(rank)
	switch kind {
	case "json":
		// A list endpoint: its page is fixed by the URL, the order of the
		// parameters by the script that built it.
		page := strconv.Itoa(1 + rank%3)
		if r.IntN(10) < 3 {
			path += "?sort=new&page=" + page
		} else {
			path += "?page=" + page + "&sort=new"
		}
	case "html":
		if vis.profile.Kind == "browser" && r.Float64() < rp.cfg.Campaign {
			switch r.IntN(4) {
			case 0:
				path += "?gclid=" + strconv.FormatUint(r.Uint64(), 36)
			case 1:
				path += "?fbclid=IwAR" + strconv.FormatUint(r.Uint64(), 36)
			default:
				path += "?" + campaigns[r.IntN(len(campaigns))]
			}
		}
	}
	h := http.Header{}
	h.Set("User-Agent", vis.profile.UserAgent)
	accept := vis.profile.Accept[kind]
	if accept == "" {
		accept = vis.profile.Accept["default"]
	}
	if accept == "" {
		accept = "*/*"
	}
	h.Set("Accept", accept)
	if vis.profile.AcceptEncoding != "" {
		h.Set("Accept-Encoding", vis.profile.AcceptEncoding)
	}
	if vis.lang != "" {
		h.Set("Accept-Language", vis.lang)
	}
	if c := vis.cookieHeader(); c != "" {
		h.Set("Cookie", c)
	}
	return ReplayRequest{Visitor: v, Profile: vis.profile.Name, Host: host, Path: path, Kind: kind,
		Session: vis.session, Header: h}
}

func (vis visitor) cookieHeader() string {
	if vis.session == "" {
		return strings.Join(vis.cookies, "; ")
	}
	all := make([]string, 0, len(vis.cookies)+1)
	all = append(all, vis.cookies[:vis.sidIndex]...)
	all = append(all, "sid="+vis.session)
	all = append(all, vis.cookies[vis.sidIndex:]...)
	return strings.Join(all, "; ")
}

// readClients reads the profiles from path, or the built-in ones for "".
func readClients(path string) ([]ClientProfile, error) {
	data := defaultClients
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("--clients: %w", err)
		}
	}
	return LoadClients(data)
}
