package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/invalidate"
)

const (
	// purgeTimeout bounds one sidecar's purge, port-forward included.
	purgeTimeout = time.Minute
	// maxAnswer bounds what is read of a sidecar's answer.
	maxAnswer = 1 << 20
	// parallelPurges is how many pods a purge without L2 reaches at once.
	parallelPurges = 8
	// A sidecar over its purge rate limit answers 429 with Retry-After
	// (a purge of everything empties the bucket: with the default
	// --purge-rate and --purge-burst the next purge waits 5s). purge
	// waits that long and sends again, up to rateRetries times, when the
	// wait is at most maxRetryAfter; a longer one is the user's to wait.
	maxRetryAfter = 5 * time.Second
	rateRetries   = 3
)

type purgeFlags struct {
	urls, tags, addresses []string
	prefix, tokenFile     string
	all, soft, noToken    bool
	output                *string
}

func (r *runner) purgeCommand() *cobra.Command {
	var f purgeFlags
	cmd := &cobra.Command{
		Use:   "purge TIER (--url URL... | --prefix PATH | --tag TAG... | --all) [--soft]",
		Short: "Remove cached responses from a tier's sidecars, or mark them stale",
		Long: `purge removes cached responses by URL, path prefix or tag (Surrogate-Key / Cache-Tag),
or everything with --all, through the admin purge API of the tier's sidecars.

With --soft it marks them stale instead (Varnish's soft purge): they stay stored
and are served only within their stale windows (stale-while-revalidate, while one
refresh runs; stale-if-error when the origin fails), and are revalidated with
their validators or fetched again otherwise. The origin sees one refresh per
response instead of a stampede of misses.

The token is the tier's own, read from the Secret its sidecars get it from
(spec.purge.tokenSecretRef, else the generated Secret <tier>-tiercache, key purge-token).

With L2 one sidecar is enough: it purges Redis and, over the tier's invalidation
channel, every replica's L1. Without L2 every running pod of the tier is purged.
Pods are reached by port-forward (like kubectl port-forward, so you need create on
pods/portforward). --address sends the purge straight to admin addresses instead
(standalone sidecars, or a port-forward of your own).

A sidecar over its purge rate limit answers 429 with Retry-After (as right after
--all, which takes its whole burst): purge waits that long and sends again, at most
3 times, when it is 5s or less, and fails naming the wait otherwise.

Each sidecar's answer is printed; the exit code is 1 unless the purge reached the
whole tier.`,
		Example: `  kubectl tiercache purge web -n shop --url /products/42 --url https://shop.example/
  kubectl tiercache purge web -n shop --prefix /api/v1/
  kubectl tiercache purge web -n shop --tag product-42
  kubectl tiercache purge web -n shop --tag product-42 --soft
  kubectl tiercache purge web -n shop --all
  kubectl tiercache purge web --address 127.0.0.1:9090 --no-token --url /hello`,
		Args: exactArgs("TIER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.purge(cmd.Context(), args[0], &f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.urls, "url", nil, "purge this URL, absolute (https://host/path?q) or origin-form (/path?q: every host); repeatable")
	fl.StringVar(&f.prefix, "prefix", "", "purge every path starting with this prefix (/api/v1/)")
	fl.StringArrayVar(&f.tags, "tag", nil, "purge responses tagged so by the origin (Surrogate-Key, Cache-Tag); repeatable")
	fl.BoolVar(&f.all, "all", false, "purge everything the tier holds (alone)")
	fl.BoolVar(&f.soft, "soft", false, "mark what the purge names stale instead of removing it: served within its stale windows while it is refreshed, revalidated otherwise")
	fl.StringArrayVar(&f.addresses, "address", nil, "send to this admin address (host:port) instead of the tier's pods; repeatable")
	fl.StringVar(&f.tokenFile, "purge-token-file", "", "read the purge token from this file instead of the tier's Secret (the API server is then not asked for the token)")
	fl.BoolVar(&f.noToken, "no-token", false, "send no token (a standalone sidecar without one accepts purges from its own loopback only); with --address")
	f.output = outputFlag(cmd)
	return cmd
}

// request builds the purge request from the flags and checks it as the
// sidecar will (invalidate.Request.Validate), so that a bad purge is
// refused before anything is sent.
func (f *purgeFlags) request() (invalidate.Request, error) {
	req := invalidate.Request{URLs: f.urls, Prefix: f.prefix, Tags: f.tags, All: f.all, Soft: f.soft}
	switch {
	case f.all && (len(f.urls) > 0 || f.prefix != "" || len(f.tags) > 0):
		return req, usagef("--all purges everything and goes alone, without --url, --prefix or --tag")
	case !f.all && len(f.urls) == 0 && f.prefix == "" && len(f.tags) == 0:
		return req, usagef("nothing to purge: give --url, --prefix, --tag or --all")
	case f.noToken && f.tokenFile != "":
		return req, usagef("--no-token and --purge-token-file do not go together")
	case f.noToken && len(f.addresses) == 0:
		return req, usagef("--no-token needs --address: the tier's pods always require their token")
	}
	for _, a := range f.addresses {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return req, usagef("--address: must be host:port, e.g. 127.0.0.1:9090 (got %q)", a)
		}
	}
	if err := req.Validate(); err != nil {
		// The sidecar's field names, with the flags that set them.
		msg := strings.NewReplacer("urls[", "--url[", "prefix:", "--prefix:", "tags[", "--tag[").Replace(err.Error())
		return req, usagef("invalid purge: %s", strings.ReplaceAll(msg, "\n", "; "))
	}
	return req, nil
}

// answer is what one sidecar answered to a purge.
type answer struct {
	// Sidecar is the pod's name, or the --address.
	Sidecar string `json:"sidecar"`
	// Status is the HTTP status; 0 when no answer came.
	Status int `json:"status,omitempty"`
	// Answer is the sidecar's JSON answer ({"purged":n,"l1":x,"l2":y,
	// "bodies":z,"soft":false}, or {"error":...}), as it is.
	Answer json.RawMessage `json:"answer,omitempty"`
	// Error says why no answer came (or why it was not JSON).
	Error string `json:"error,omitempty"`
}

func (a *answer) ok() bool { return a.Status >= 200 && a.Status < 300 }

// purgeReport is the output of purge.
type purgeReport struct {
	Tier    string   `json:"tier"`
	Request any      `json:"request"`
	L2      *bool    `json:"l2,omitempty"`
	Answers []answer `json:"answers"`
	// Skipped lists pods of the tier that were not purged and why.
	Skipped []string `json:"skipped,omitempty"`
}

func (r *runner) purge(ctx context.Context, tierName string, f *purgeFlags) error {
	if err := checkOutput(*f.output); err != nil {
		return err
	}
	req, err := f.request()
	if err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	rep := purgeReport{Tier: tierName, Request: req}

	token, fromFile, err := f.fileToken()
	if err != nil {
		return err
	}
	var k *cluster
	var tier *v1alpha1.CacheTier
	if !fromFile || len(f.addresses) == 0 {
		if k, err = r.cluster(); err != nil {
			return err
		}
		if tier, err = k.tier(ctx, tierName); err != nil {
			return err
		}
		rep.Tier = tier.Namespace + "/" + tier.Name
		if !fromFile {
			if token, err = k.purgeToken(ctx, tier); err != nil {
				return err
			}
		}
	}
	send := sender{token: token, body: body}

	var failed error
	if len(f.addresses) > 0 {
		rep.Answers = send.toAddresses(ctx, f.addresses)
		failed = allOK(rep.Answers)
	} else {
		access := r.opts.Pods
		if access == nil {
			if access, err = newAPIServerPods(k.rest); err != nil {
				return err
			}
		}
		pods, err := k.tierPods(ctx, tier)
		if err != nil {
			return err
		}
		l2 := hasL2(tier)
		rep.L2 = &l2
		failed = send.toPods(ctx, access, tier, pods, l2, &rep)
	}
	if err := r.printPurge(&rep, *f.output); err != nil {
		return err
	}
	return failed
}

// fileToken returns the token the flags give: from --purge-token-file, or none
// with --no-token (fromFlags true), else fromFlags false.
func (f *purgeFlags) fileToken() (token string, fromFlags bool, err error) {
	switch {
	case f.noToken:
		return "", true, nil
	case f.tokenFile == "":
		return "", false, nil
	}
	token, err = readTokenFile(f.tokenFile)
	if err != nil {
		return "", false, err
	}
	return token, true, nil
}

// readTokenFile reads --purge-token-file: the token without its trailing
// newline; an empty file is an error.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--purge-token-file: %w", err)
	}
	token := strings.TrimRight(string(b), "\r\n")
	if token == "" {
		return "", fmt.Errorf("--purge-token-file: %s is empty", path)
	}
	return token, nil
}

// hasL2 reports whether the tier's sidecars share a Redis L2, through
// which one sidecar's purge reaches every replica.
func hasL2(t *v1alpha1.CacheTier) bool { return t.Spec.L2 != nil && len(t.Spec.L2.Addresses) > 0 }

// allOK returns an error naming the sidecars that did not purge (and,
// when one was rate limited, what it asks).
func allOK(as []answer) error {
	var bad []string
	for i := range as {
		switch a := &as[i]; {
		case a.ok():
		case a.Status == http.StatusTooManyRequests && a.Error != "":
			bad = append(bad, a.Sidecar+" ("+a.Error+")")
		default:
			bad = append(bad, a.Sidecar)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the purge failed on %d of %d sidecar(s): %s", len(bad), len(as), strings.Join(bad, ", "))
	}
	return nil
}

// purgeTargets splits the tier's pods into those whose sidecar can be
// purged (running and injected; with L2 the ready ones first, since one is
// enough and a ready one is the likeliest to answer) and the others, with
// the reason ("web-3: pending").
func purgeTargets(pods []corev1.Pod, l2 bool) (targets []*corev1.Pod, skipped []string) {
	for i := range pods {
		if why := podState(&pods[i]); why != "" {
			skipped = append(skipped, pods[i].Name+": "+why)
			continue
		}
		targets = append(targets, &pods[i])
	}
	if l2 {
		slices.SortStableFunc(targets, func(a, b *corev1.Pod) int {
			ra, rb := podReady(a), podReady(b)
			switch {
			case ra == rb:
				return 0
			case ra:
				return -1
			}
			return 1
		})
	}
	return targets, skipped
}

// sender sends one purge body with one token.
type sender struct {
	token string
	body  []byte
}

func (s sender) toAddresses(ctx context.Context, addrs []string) []answer {
	out := make([]answer, len(addrs))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelPurges)
	for i, a := range addrs {
		g.Go(func() error {
			out[i] = s.send(ctx, a, a)
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// toPods purges the tier through its pods: with L2 the first that answers
// (and, when its answer says that the shared part failed, every other
// one), without L2 all of them. It returns an error unless the purge
// reached the whole tier.
func (s sender) toPods(ctx context.Context, access PodAccess, tier *v1alpha1.CacheTier, pods []corev1.Pod, l2 bool, rep *purgeReport) error {
	targets, skipped := purgeTargets(pods, l2)
	rep.Skipped = skipped
	if len(targets) == 0 {
		why := "no pods are labelled or annotated for it"
		if len(skipped) > 0 {
			why = strings.Join(skipped, "; ")
		}
		return fmt.Errorf("no running sidecar of CacheTier %s/%s to purge: %s", tier.Namespace, tier.Name, why)
	}
	one := func(ctx context.Context, p *corev1.Pod) answer {
		ctx, cancel := context.WithTimeout(ctx, purgeTimeout)
		defer cancel()
		addr, stop, err := access.Forward(ctx, p, adminPort(p, tier))
		if err != nil {
			return answer{Sidecar: p.Name, Error: err.Error()}
		}
		defer stop()
		return s.send(ctx, p.Name, addr)
	}
	if !l2 {
		rep.Answers = make([]answer, len(targets))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(parallelPurges)
		for i, p := range targets {
			g.Go(func() error {
				rep.Answers[i] = one(gctx, p)
				return nil
			})
		}
		_ = g.Wait()
		return allOK(rep.Answers)
	}
	for i, p := range targets {
		a := one(ctx, p)
		rep.Answers = append(rep.Answers, a)
		switch {
		case a.ok():
			return nil
		case a.Status == http.StatusBadGateway:
			// Applied on that sidecar, but L2 or the fan-out failed: the
			// other replicas' L1 may still hold what was purged.
			rest := make([]answer, len(targets)-i-1)
			for j, q := range targets[i+1:] {
				rest[j] = one(ctx, q)
			}
			rep.Answers = append(rep.Answers, rest...)
			if err := allOK(rest); err != nil || len(rest) == 0 {
				return fmt.Errorf("the purge reached %s but not L2 or the other replicas (%s answered %d); purge again once L2 is back", p.Name, p.Name, a.Status)
			}
			return nil
		case a.Status != 0:
			// Refused (token, rate limit, bad request): every sidecar of
			// the tier would answer the same.
			if a.Error != "" {
				return fmt.Errorf("sidecar %s refused the purge with %d: %s", p.Name, a.Status, a.Error)
			}
			return fmt.Errorf("sidecar %s refused the purge with %d", p.Name, a.Status)
		}
		// No answer: try the next pod.
	}
	return fmt.Errorf("no sidecar of CacheTier %s/%s answered the purge", tier.Namespace, tier.Name)
}

// send POSTs the purge to the admin address addr (host:port). Over the
// sidecar's rate limit it waits the Retry-After the sidecar names and
// sends again, when that is short (see maxRetryAfter).
func (s sender) send(ctx context.Context, name, addr string) answer {
	ctx, cancel := context.WithTimeout(ctx, purgeTimeout)
	defer cancel()
	for try := 0; ; try++ {
		a, retryAfter := s.sendOnce(ctx, name, addr)
		if a.Status != http.StatusTooManyRequests {
			return a
		}
		switch {
		case retryAfter < 0:
			a.Error = "rate limited by the sidecar (no Retry-After): run the purge again in a few seconds"
			return a
		case retryAfter > maxRetryAfter:
			a.Error = fmt.Sprintf("rate limited by the sidecar: it asks to wait %s, longer than the %s purge waits; run the purge again after that", retryAfter, maxRetryAfter)
			return a
		case try == rateRetries:
			a.Error = fmt.Sprintf("rate limited by the sidecar %d times in a row (waited its Retry-After each time); run the purge again in a few seconds", rateRetries+1)
			return a
		}
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			a.Error = fmt.Sprintf("rate limited by the sidecar; gave up waiting its Retry-After (%s): %v", retryAfter, ctx.Err())
			return a
		case <-t.C:
		}
	}
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP-date
// (RFC 9110 10.2.3); -1 when absent or unreadable.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return -1
	}
	if n, err := strconv.ParseUint(strings.TrimSpace(h), 10, 31); err == nil {
		return time.Duration(n) * time.Second
	}
	if at, err := http.ParseTime(h); err == nil {
		return max(at.Sub(now), 0)
	}
	return -1
}

// sendOnce POSTs the purge once; retry is the answer's Retry-After (-1
// when it names none).
func (s sender) sendOnce(ctx context.Context, name, addr string) (a answer, retry time.Duration) {
	a = answer{Sidecar: name}
	retry = -1
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/purge", bytes.NewReader(s.body))
	if err != nil {
		a.Error = err.Error()
		return a, retry
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	c := &http.Client{
		// The token goes to the admin address and nowhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Do(req)
	if err != nil {
		a.Error = err.Error()
		return a, retry
	}
	defer resp.Body.Close()
	a.Status = resp.StatusCode
	if a.Status == http.StatusTooManyRequests {
		retry = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	switch {
	case err != nil:
		a.Error = "reading the answer: " + err.Error()
	case json.Valid(b):
		a.Answer = json.RawMessage(bytes.TrimSpace(b))
	default:
		a.Error = fmt.Sprintf("not a purge answer (no JSON): %.200q", b)
	}
	return a, retry
}

func (r *runner) printPurge(rep *purgeReport, output string) error {
	out := r.streams.Out
	if output == "json" {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SIDECAR\tSTATUS\tANSWER")
	for _, a := range rep.Answers {
		status, text := "-", string(a.Answer)
		if a.Status != 0 {
			status = fmt.Sprint(a.Status)
		}
		if a.Error != "" {
			text = strings.TrimSpace(text + " " + a.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Sidecar, status, text)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.L2 != nil && *rep.L2 {
		fmt.Fprintln(out, "The tier has L2: one sidecar purges Redis and, through the invalidation channel, every replica's L1.")
	}
	for _, s := range rep.Skipped {
		fmt.Fprintln(out, "not purged:", s)
	}
	return nil
}
