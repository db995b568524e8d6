package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

const usage = `loadgen: HTTP load against loopback servers (127.0.0.0/8, ::1, localhost only)

  loadgen fixed --url URL [--url URL ...] [--concurrency 32] [--duration 10s]
      closed loop over the URLs in turn
  loadgen herd --base URL [--keys 10000] [--concurrency 600] [--duration 10s] [--origin-stats URL]
      the herd mix: 80% of requests to the 50 hottest keys, 15% to the next 450,
      4% to the next 4,500 (uniformly within each band), 1% to URLs that 404;
      key k is <base>/bytes/<k>?size=1024&ttl=1&swr=86400

Common flags: --max-requests N (default 10000000), --timeout D (per request,
default 10s), --json (print the result as one JSON object on stdout; the text
summary then goes to stderr). Run 'loadgen <command> --help' for all flags.
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
}

func (c *common) register(fs *flag.FlagSet, concurrency int) {
	fs.IntVar(&c.concurrency, "concurrency", concurrency, "number of workers, each with one request in flight")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long the run lasts (at most 1h)")
	fs.Int64Var(&c.maxRequests, "max-requests", 10_000_000, "stop after this many requests")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on one request, body included")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the workers' random choices")
	fs.BoolVar(&c.json, "json", false, "print the result as one JSON object on stdout (the text goes to stderr)")
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
	}
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
	c.register(fs, 32)
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
	res, err := Run(ctx, c.config(targets, nil))
	if err != nil {
		return err
	}
	res.Scenario = "fixed"
	return report(res, c.json, stdout, stderr)
}

func herd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen herd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var hc HerdConfig
	fs.StringVar(&hc.Base, "base", "", "base URL of the cache under test (required)")
	fs.IntVar(&hc.Keys, "keys", 10000, "size of the key space")
	fs.IntVar(&hc.Size, "size", 1024, "body size asked of the origin")
	fs.IntVar(&hc.TTL, "ttl", 1, "max-age asked of the origin, in seconds")
	fs.IntVar(&hc.SWR, "swr", 86400, "stale-while-revalidate asked of the origin, in seconds")
	statsURL := fs.String("origin-stats", "", "the origin's /stats URL: reset before the run, read after it")
	var c common
	c.register(fs, 600)
	if err := parse(fs, args); err != nil {
		return err
	}
	if hc.Base == "" {
		return errors.New("--base: required")
	}
	h, err := NewHerd(hc)
	if err != nil {
		return err
	}
	cfg := c.config(h.Targets, h)
	if err := cfg.Validate(); err != nil {
		return err
	}

	statsClient := NewClient(NewTransport(1), 5*time.Second)
	if *statsURL != "" {
		if err := ResetOriginStats(ctx, statsClient, *statsURL); err != nil {
			return err
		}
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Scenario = "herd"
	if *statsURL != "" {
		// The run's context may be done (Ctrl-C); the count is still wanted.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s, err := ReadOriginStats(sctx, statsClient, *statsURL)
		if err != nil {
			return err
		}
		res.Origin = &s
	}
	return report(res, c.json, stdout, stderr)
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
