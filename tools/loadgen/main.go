// Command loadgen is the benchmarks' HTTP load generator (make bench,
// hack/bench.sh): closed-loop workers over a bounded run, latency
// histograms with bounded memory, the X-Cache distribution of the answers,
// per-key fetch counts (plain MISS answers), and the key mixes used by the
// benchmarks ("herd", "uniform", and "flood", a new key every request).
// Besides runs, it times one large GET to its first and last body byte
// (FetchOne) and measures how long a cache serves a response as fresh
// (ProbeFreshness). The browser-mix replay (replay.go, replay_run.go)
// sends a seeded site's traffic with real clients' headers and cookies,
// decodes every answer and checks that no client ever receives a page
// made for another signed-in visitor. It reads the X-Cache values of Tiercache and of nginx's
// $upstream_cache_status alike. A run can spread its requests over several
// servers (replicas behind a Service), follow a list of them that changes
// while it runs (a rolling restart), and report itself interval by
// interval next to the origin's request counter. It is tooling, not part
// of the product: nothing in cmd/ or internal/ imports it.
//
// It sends traffic to loopback addresses only (127.0.0.0/8, ::1, localhost):
// URLs are checked before a run, and the dialer refuses any other address,
// so a redirect or a name resolving elsewhere cannot escape the machine.
//
// Why not vegeta or hey. What the benchmarks publish is counted per answer
// from its X-Cache header (from cache or not, per key, per replica, per
// interval, and the slow answers by value) next to the origin's own
// request counter (demo-origin's /stats, reset before the run and read in
// every interval), in key mixes drawn per request, over a list of replicas
// re-read while a rolling restart goes on, behind a dialer that refuses
// anything but loopback; plus a first/last-byte probe and a freshness
// probe that no load tool has. hey is a command, not a library, and
// reports status codes only. vegeta's attacker could send the requests
// (rate 0 with a fixed worker count is closed-loop, a custom Targeter could
// draw the mixes), but every measurement above would still be written
// here, on top of its result stream, and its scheduling and connection
// handling would change the published figures (herd, cold/warm, the nginx
// comparison) that earlier runs are compared with: the load loop is the
// small part (run.go), so it stays.
//
// Why not github.com/HdrHistogram/hdrhistogram-go. Histogram (histogram.go)
// is the same log-linear idea in about a hundred lines, and the summaries
// report the exact min, max and mean beside its quantiles; hdrhistogram-go
// reports those from bucket-equivalent values, so the published figures
// would move in their last digits for no gain, and the tool would bring a
// module into go.mod that the product does not use.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
