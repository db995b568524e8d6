package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

const usage = `loadgen: HTTP load against loopback servers (127.0.0.0/8, ::1, localhost only)

  loadgen fixed --url URL [--url URL ...] [--concurrency 32] [--duration 10s]
      closed loop over the URLs in turn
  loadgen herd --base URL [--base URL ...] [--keys 10000] [--concurrency 600] [--duration 10s]
      the herd mix: 80% of requests to the 50 hottest keys, 15% to the next 450,
      4% to the next 4,500 (uniformly within each band), 1% to URLs that 404;
      key k is <base>/bytes/<k>?size=1024&ttl=1&swr=86400
  loadgen uniform --base URL [--base URL ...] [--keys 2000] [--concurrency 32] [--duration 10s] [--fill]
      every key equally likely; key n is <base>/bytes/k<n>?size=1024&ttl=3600
      (--prefix, --size, --ttl); --fill requests every key exactly once, in
      order, then stops (to warm a cache)
  loadgen flood --base URL [--base URL ...] [--concurrency 64] [--duration 60s]
      every request asks for a key never asked for before: request n is
      <base>/bytes/<prefix><n>?size=1024&ttl=3600 (--prefix f, --size, --ttl),
      so a cache stores one new entry per request (its memory under churn)
  loadgen replay --base URL [--requests 20000] [--concurrency 16] [--duration 5m] [--seed 1]
      the browser-mix replay against demo-origin's /site/: request n of a seed is always
      the same (Zipf over --urls on --hosts, headers of --clients profiles, analytics
      and session cookies); reports from-cache share, bytes, origin requests and bytes
      (--origin-stats), server CPU (--cpu-pid), and fails when any answer carries a
      session marker that is not the request's own (LEAK CHECK)
  loadgen get --url URL [--host NAME] [--timeout 2m] [--json]
      one GET, the body read to its end: when the first body byte and the
      last arrived (wall clock and since the request) and MB/s (10^6 B/s)
  loadgen freshness --base URL [--trials 8] [--ttl 1] [--poll 10ms] [--json]
      how long a cache serves a max-age=<ttl> response as a HIT: each trial
      fetches a new key at a different point of a wall-clock second, then
      polls until the answer is not a HIT

Several --base URLs (herd, uniform): each request goes to the next one in turn,
round robin, like a Service over replicas; results are then broken down by base.
--bases-file FILE instead reads them from FILE (one URL a line, # comments) and
re-reads it every 200ms while the run goes on, so a script can take a server
out before stopping it and put it back once it is ready; the changes are
listed in the result. The host is part of a cache key: give --host NAME so
that every replica sees the same Host header, as behind a Service.

Common flags: --max-requests N (default 10000000), --timeout D (per request,
default 10s), --json (print the result as one JSON object on stdout; the text
summary then goes to stderr), --host NAME (the Host header of every request),
--origin-stats URL (the demo origin's /stats: reset before the run, read
after it), --interval D (also report the run interval by interval: requests
and X-Cache values, per base too, and with --origin-stats the origin's
requests in each interval, by class), --slow D (answers that took this long
or longer are counted by X-Cache value, default 100ms).

"From cache" is X-Cache HIT or STALE (Tiercache) and also UPDATING (nginx's
$upstream_cache_status); REVALIDATED, MISS, EXPIRED and BYPASS are not.

Every result counts X-Cache values by first token (x_cache) and whole
(x_cache_detail, e.g. "HIT; layer=l2"), and per key (keys): how many distinct
keys were answered, how many got a plain "MISS" (the server that answered
fetched the key from its origin for that request) and how many such misses
each of them got. Run 'loadgen <command> --help' for all flags.
`

// Main runs the loadgen command line: args are the arguments after the
// program name.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "fixed":
		return fixed(ctx, args[1:], stdout, stderr)
	case "herd":
		return herd(ctx, args[1:], stdout, stderr)
	case "uniform":
		return uniform(ctx, args[1:], stdout, stderr)
	case "flood":
		return flood(ctx, args[1:], stdout, stderr)
	case "get":
		return get(ctx, args[1:], stdout, stderr)
	case "replay":
		return replay(ctx, args[1:], stdout, stderr)
	case "freshness":
		return freshness(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// common holds the flags every command has.
type common struct {
	concurrency int
	duration    time.Duration
	maxRequests int64
	timeout     time.Duration
	seed        uint64
	json        bool
	originStats string
	interval    time.Duration
	host        string
	slow        time.Duration
}

func (c *common) register(fs *flag.FlagSet, concurrency int, duration time.Duration) {
	fs.IntVar(&c.concurrency, "concurrency", concurrency, "number of workers, each with one request in flight")
	fs.DurationVar(&c.duration, "duration", duration, "how long the run lasts (at most 1h)")
	fs.DurationVar(&c.slow, "slow", DefaultSlow, "answers that take this long or longer count as slow (slow_x_cache)")
	fs.Int64Var(&c.maxRequests, "max-requests", 10_000_000, "stop after this many requests")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on one request, body included")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the workers' random choices")
	fs.BoolVar(&c.json, "json", false, "print the result as one JSON object on stdout (the text goes to stderr)")
	fs.StringVar(&c.originStats, "origin-stats", "", "the demo origin's /stats URL: reset before the run, read after it (and at every --interval)")
	fs.StringVar(&c.host, "host", "", "Host header of every request (default: the URL's host); replicas behind one Service all see the same one")
	fs.DurationVar(&c.interval, "interval", 0, "report a timeline with intervals of this length (0: none; >= 100ms)")
}

func (c *common) config(targets []Target, chooser Chooser) Config {
	return Config{
		Targets:     targets,
		Chooser:     chooser,
		Concurrency: c.concurrency,
		Duration:    c.duration,
		MaxRequests: c.maxRequests,
		Timeout:     c.timeout,
		Seed:        c.seed,
		OriginStats: c.originStats,
		Interval:    c.interval,
		Host:        c.host,
		Slow:        c.slow,
	}
}

// servers holds the flags that say where origin-form targets go.
type servers struct {
	bases urlList
	file  string
}

func (sv *servers) register(fs *flag.FlagSet) {
	fs.Var(&sv.bases, "base", "base URL of a server under test (repeatable: requests go to each in turn)")
	fs.StringVar(&sv.file, "bases-file", "", "read the base URLs from this file, one a line, re-read every 200ms during the run")
}

func (sv *servers) apply(cfg *Config) error {
	if len(sv.bases) == 0 && sv.file == "" {
		return errors.New("--base: at least one is required (or --bases-file)")
	}
	cfg.Bases, cfg.BasesFile = sv.bases, sv.file
	return nil
}

// urlList is a repeatable string flag.
type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error { *u = append(*u, v); return nil }

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return nil
}

func fixed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen fixed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var urls urlList
	fs.Var(&urls, "url", "URL to request (repeatable; requested in turn)")
	var c common
	c.register(fs, 32, 10*time.Second)
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(urls) == 0 {
		return errors.New("--url: at least one is required")
	}
	targets := make([]Target, len(urls))
	for i, u := range urls {
		targets[i] = Target{URL: u}
	}
	return runAndReport(ctx, c.config(targets, nil), "fixed", c.json, stdout, stderr)
}

func herd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen herd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var hc HerdConfig
	var sv servers
	sv.register(fs)
	fs.IntVar(&hc.Keys, "keys", 10000, "size of the key space")
	fs.IntVar(&hc.Size, "size", 1024, "body size asked of the origin")
	fs.IntVar(&hc.TTL, "ttl", 1, "max-age asked of the origin, in seconds")
	fs.IntVar(&hc.SWR, "swr", 86400, "stale-while-revalidate asked of the origin, in seconds")
	var c common
	c.register(fs, 600, 10*time.Second)
	if err := parse(fs, args); err != nil {
		return err
	}
	h, err := NewHerd(hc)
	if err != nil {
		return err
	}
	cfg := c.config(h.Targets, h)
	if err := sv.apply(&cfg); err != nil {
		return err
	}
	return runAndReport(ctx, cfg, "herd", c.json, stdout, stderr)
}

func uniform(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen uniform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var uc UniformConfig
	var sv servers
	sv.register(fs)
	fs.IntVar(&uc.Keys, "keys", 2000, "size of the key space")
	fs.StringVar(&uc.Prefix, "prefix", "k", "goes before the key number in the path")
	fs.IntVar(&uc.Size, "size", 1024, "body size asked of the origin")
	fs.IntVar(&uc.TTL, "ttl", 3600, "max-age asked of the origin, in seconds")
	fill := fs.Bool("fill", false, "request every key exactly once, in order, then stop (--max-requests is ignored)")
	var c common
	c.register(fs, 32, 10*time.Second)
	if err := parse(fs, args); err != nil {
		return err
	}
	u, err := NewUniform(uc)
	if err != nil {
		return err
	}
	var chooser Chooser = u
	if *fill {
		chooser = NewSequence(len(u.Targets))
		c.maxRequests = int64(len(u.Targets))
	}
	cfg := c.config(u.Targets, chooser)
	if err := sv.apply(&cfg); err != nil {
		return err
	}
	scenario := "uniform"
	if *fill {
		scenario = "uniform-fill"
	}
	return runAndReport(ctx, cfg, scenario, c.json, stdout, stderr)
}

func runAndReport(ctx context.Context, cfg Config, scenario string, asJSON bool, stdout, stderr io.Writer) error {
	res, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Scenario = scenario
	return report(res, asJSON, stdout, stderr)
}

func report(res *Result, asJSON bool, stdout, stderr io.Writer) error {
	if !asJSON {
		res.WriteText(stdout)
		return nil
	}
	res.WriteText(stderr)
	enc := json.NewEncoder(stdout)
	return enc.Encode(res)
}

func flood(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen flood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var fc FloodConfig
	var sv servers
	sv.register(fs)
	fs.StringVar(&fc.Prefix, "prefix", "f", "goes before the request number in the path")
	fs.IntVar(&fc.Size, "size", 1024, "body size asked of the origin")
	fs.IntVar(&fc.TTL, "ttl", 3600, "max-age asked of the origin, in seconds")
	var c common
	c.register(fs, 64, 60*time.Second)
	if err := parse(fs, args); err != nil {
		return err
	}
	f, err := NewFlood(fc)
	if err != nil {
		return err
	}
	cfg := c.config(nil, nil)
	cfg.Generator = f
	if err := sv.apply(&cfg); err != nil {
		return err
	}
	return runAndReport(ctx, cfg, "flood", c.json, stdout, stderr)
}

func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "URL to fetch (loopback only)")
	host := fs.String("host", "", "Host header (default: the URL's host)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the request, body included")
	asJSON := fs.Bool("json", false, "print the result as one JSON object on stdout (the text goes to stderr)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *url == "":
		return errors.New("--url: required")
	case *timeout <= 0:
		return errors.New("--timeout: must be > 0")
	case *host != "" && !validHost(*host):
		return fmt.Errorf("--host: %q is not a host[:port]", *host)
	}
	tr := NewTransport(1)
	defer tr.CloseIdleConnections()
	g, err := FetchOne(ctx, NewClient(tr, *timeout), *url, *host)
	if err != nil {
		return err
	}
	text := stdout
	if *asJSON {
		text = stderr
	}
	fmt.Fprintf(text, "get           %s: %d, X-Cache %s, %d bytes\n", g.URL, g.Status, g.XCache, g.Bytes)
	fmt.Fprintf(text, "first byte    %.3fs, last %.3fs, %.0f MB/s (body alone %.0f MB/s)\n", g.FirstByteS, g.TotalS, g.MBPerS, g.BodyMBPerS)
	if !*asJSON {
		return nil
	}
	return json.NewEncoder(stdout).Encode(g)
}

func freshness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen freshness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var fc FreshnessConfig
	fs.StringVar(&fc.Base, "base", "", "the cache's base URL (loopback only)")
	fs.StringVar(&fc.Prefix, "prefix", "fresh", "goes before the trial number in the path")
	fs.IntVar(&fc.Trials, "trials", 8, "number of trials, spread over a second")
	fs.IntVar(&fc.TTL, "ttl", 1, "max-age asked of the origin, in seconds")
	fs.DurationVar(&fc.Poll, "poll", 10*time.Millisecond, "time between two polls of a trial")
	fs.StringVar(&fc.Host, "host", "", "Host header (default: the URL's host)")
	asJSON := fs.Bool("json", false, "print the trials as one JSON object on stdout (the text goes to stderr)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fc.Host != "" && !validHost(fc.Host) {
		return fmt.Errorf("--host: %q is not a host[:port]", fc.Host)
	}
	tr := NewTransport(1)
	defer tr.CloseIdleConnections()
	trials, err := ProbeFreshness(ctx, NewClient(tr, 10*time.Second), fc)
	if err != nil {
		return err
	}
	text := stdout
	if *asJSON {
		text = stderr
	}
	var sum float64
	for _, t := range trials {
		sum += t.FreshS
		fmt.Fprintf(text, "fetched at +%.2fs of a second: HIT for %.3fs, then %s\n", t.Offset, t.FreshS, t.Then)
	}
	mean := sum / float64(len(trials))
	fmt.Fprintf(text, "mean          %.3fs served as HIT with max-age=%d\n", mean, fc.TTL)
	if !*asJSON {
		return nil
	}
	return json.NewEncoder(stdout).Encode(struct {
		TTL    int              `json:"ttl"`
		MeanS  float64          `json:"mean_s"`
		Trials []FreshnessTrial `json:"trials"`
	}{fc.TTL, mean, trials})
}

// pidList is a repeatable --cpu-pid flag.
type pidList []int

func (p *pidList) String() string { return fmt.Sprint(*p) }
func (p *pidList) Set(v string) error {
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("want a process id, got %q", f)
		}
		*p = append(*p, n)
	}
	return nil
}

func replay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rc := DefaultReplayConfig()
	run := ReplayRun{}
	fs.StringVar(&run.Base, "base", "", "the server under test (loopback only)")
	fs.IntVar(&run.Concurrency, "concurrency", 16, "number of workers, each with one request in flight")
	fs.Int64Var(&run.Requests, "requests", 20000, "requests 0..N-1 of the replay")
	fs.DurationVar(&run.Duration, "duration", 5*time.Minute, "bound on the run (at most 1h)")
	fs.DurationVar(&run.Timeout, "timeout", 10*time.Second, "bound on one request, body included")
	fs.StringVar(&run.OriginStats, "origin-stats", "", "demo-origin's /stats URL: reset before the run, read after it")
	var pids pidList
	fs.Var(&pids, "cpu-pid", "a process of the server whose CPU time counts (repeatable, or comma-separated)")
	fs.Uint64Var(&rc.Seed, "seed", rc.Seed, "seed of the workload")
	fs.IntVar(&rc.URLs, "urls", rc.URLs, "distinct resources")
	hosts := fs.String("hosts", strings.Join(rc.Hosts, ","), "Host headers the resources are spread over (comma-separated)")
	fs.Float64Var(&rc.ZipfS, "zipf", rc.ZipfS, "Zipf exponent of popularity")
	fs.IntVar(&rc.Visitors, "visitors", rc.Visitors, "visitors requests are drawn from")
	fs.Float64Var(&rc.Analytics, "analytics", rc.Analytics, "share of browser visitors with analytics cookies")
	fs.Float64Var(&rc.LoggedIn, "logged-in", rc.LoggedIn, "share of browser visitors signed in (session cookie sid)")
	fs.Float64Var(&rc.Campaign, "campaign", rc.Campaign, "share of browsers' page requests with tracking parameters")
	clients := fs.String("clients", "", "client profiles file (default: the built-in clients.json)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object on stdout (the text goes to stderr)")
	if err := parse(fs, args); err != nil {
		return err
	}
	rc.Hosts = strings.Split(*hosts, ",")
	var err error
	if rc.Clients, err = readClients(*clients); err != nil {
		return err
	}
	if run.Replay, err = NewReplay(rc); err != nil {
		return err
	}
	run.CPUPids = pids
	res, err := RunReplay(ctx, run)
	if err != nil {
		return err
	}
	text := stdout
	if *asJSON {
		text = stderr
	}
	res.WriteText(text)
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return err
		}
	}
	if res.Leaks > 0 {
		return ErrLeak
	}
	return nil
}
