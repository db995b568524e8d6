package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// showcase asks the Service for /hello, twice, purges it with the
// kubectl plugin and asks again, printing each command and answer. It
// returns how many answers were not the expected MISS, HIT, MISS.
func (d *demo) showcase(ctx context.Context) (failures int) {
	expect := func(want, what string, got string) {
		if got == want {
			fmt.Fprintf(d.out, "✔ %s: X-Cache %s\n", what, got)
			return
		}
		fmt.Fprintf(d.out, "✘ %s: expected X-Cache %s, got %q\n", what, want, got)
		failures++
	}
	d.say("1. The first request through the Service goes to the origin")
	expect("MISS", "first request", d.get(ctx, "/hello"))
	d.say("   The sidecar wrote the response to L2 (Redis) behind it, for every pod")
	if !d.inRedis(ctx) {
		failures++
	}
	d.say("2. The second is a hit: from the pod's own L1, or from L2 when kube-proxy picked the other pod")
	expect("HIT", "second request", d.get(ctx, "/hello"))

	d.say("3. Purge /hello with the kubectl plugin (over a port-forward to a sidecar; L2 tells every pod)")
	out, err := d.kubectlDo(ctx, "tiercache", "purge", tierName, "-n", appNS, "--url", "/hello")
	fmt.Fprint(d.out, out)
	if err != nil {
		fmt.Fprintf(d.out, "✘ purge: %v\n", err)
		failures++
	}
	d.say("4. After the purge the origin is asked again")
	expect("MISS", "after purge", d.get(ctx, "/hello"))
	return failures
}

// inRedis waits (at most 10 s: the write is queued behind the response)
// until the bundled Redis holds an entry of the tier (store/l2 names
// them tc:<namespace>/<tier>:e:<key hash>), and prints their keys.
func (d *demo) inRedis(ctx context.Context) bool {
	args := []string{"exec", "-n", releaseNS, "deploy/" + release + "-redis", "-c", "redis", "--", "redis-cli", "--scan", "--pattern", "tc:" + appNS + "/" + tierName + ":e:*"}
	var out string
	err := poll(ctx, 10*time.Second, "an entry in Redis", func() error {
		o, err := d.node.Exec(ctx, append([]string{d.kubectl}, args...)...)
		out = string(o)
		if err == nil && strings.TrimSpace(out) == "" {
			return fmt.Errorf("no key yet")
		}
		return err
	})
	shown := strings.Join(args[:len(args)-1], " ") + " '" + args[len(args)-1] + "'"
	fmt.Fprintln(d.out, "$ kubectl "+shown)
	fmt.Fprint(d.out, out)
	if err != nil {
		fmt.Fprintf(d.out, "✘ %v\n", err)
		return false
	}
	return true
}

// get runs curl inside the node's network namespace, as the user can,
// prints the answer's head and returns its X-Cache's first word.
func (d *demo) get(ctx context.Context, path string) string {
	url := d.svcURL + path
	fmt.Fprintf(d.out, "$ curl -si %s\n", url)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+d.node.NetNS(), "curl", "-si", "--max-time", "10", url).CombinedOutput()
	if err != nil {
		fmt.Fprintf(d.out, "curl: %v: %s\n", err, out)
		return ""
	}
	text := strings.ReplaceAll(string(out), "\r", "")
	fmt.Fprint(d.out, indent(text))
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(d.out)
	}
	return xCache(text)
}

// xCache is the first word of a response's X-Cache header ("HIT" of
// "HIT; layer=l2"), upper-cased, or "".
func xCache(response string) string {
	head, _, _ := strings.Cut(response, "\n\n")
	for line := range strings.Lines(head) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "X-Cache") {
			continue
		}
		f := strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' || r == ' ' || r == '\t' || r == '\n' })
		if len(f) > 0 {
			return strings.ToUpper(f[0])
		}
	}
	return ""
}

// shellLine is the command that opens a shell where the cluster
// answers: in the node's network namespace, with its kubeconfig, kubectl
// and the plugin on PATH, and kubectl's cache in the demo's directory
// (removed with it). With command it runs that instead of a shell.
func (d *demo) shellLine(command string) []string {
	line := []string{"nsenter", "--net=" + d.node.NetNS(), "env",
		"KUBECONFIG=" + d.node.Kubeconfig(), "KUBECACHEDIR=" + filepath.Join(d.dir, "kubectl-cache"),
		"PATH=" + filepath.Dir(d.kubectl) + ":" + filepath.Dir(d.cfg.plugin) + ":" + os.Getenv("PATH"), "bash"}
	if command != "" {
		line = append(line, "-c", command)
	}
	return line
}

// status runs kubectl tiercache status through shellLine, as the user
// will, and says whether it worked.
func (d *demo) status(ctx context.Context) bool {
	d.say("5. The tier, pod by pod, from a shell like the one below")
	command := "kubectl tiercache status " + tierName + " -n " + appNS
	fmt.Fprintln(d.out, "$ "+command)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	line := d.shellLine(command)
	out, err := exec.CommandContext(ctx, line[0], line[1:]...).CombinedOutput()
	fmt.Fprint(d.out, string(out))
	if err != nil {
		fmt.Fprintf(d.out, "✘ %s: %v\n", command, err)
		return false
	}
	return true
}

// tryIt prints how to reach the cluster from another terminal.
func (d *demo) tryIt() {
	line := d.shellLine("")
	// $PATH is the user's, expanded by their shell.
	line[len(line)-2] = "PATH=" + filepath.Dir(d.kubectl) + ":" + filepath.Dir(d.cfg.plugin) + `:"$PATH"`
	fmt.Fprintf(d.out, `
== Try it yourself, as root in another terminal, in a shell inside the
   cluster's network namespace (nothing outside it sees the cluster):

  %s

`, strings.Join(line, " "))
	tw := tabwriter.NewWriter(d.out, 0, 8, 2, ' ', 0)
	for _, c := range [][2]string{
		{"kubectl get pods -A", "the operator, Redis, CoreDNS, the demo app"},
		{"kubectl get ct -n " + appNS, "the tier: READY, PODS, CURRENT"},
		{"curl -si " + d.svcURL + "/hello", "HIT; layer=l1 or l2 (a MISS first: the purge's repeat, 2 s on, also took the refill)"},
		{"curl -si " + d.svcURL + "/time", "max-age=5: watch it turn stale"},
		{"curl -si " + d.svcURL + "/private", "Cache-Control: private: never stored"},
		{"kubectl tiercache status " + tierName + " -n " + appNS, "per pod: config, hit ratio, L2"},
		{"kubectl tiercache purge " + tierName + " -n " + appNS + " --url /hello", "or --prefix, --tag, --all"},
		{"kubectl tiercache explain " + tierName + " -n " + appNS + " /hello", "which rule, which key"},
		{"kubectl logs -n " + appNS + " deploy/" + appName + " -c tiercache", "the injected sidecar's log"},
		{"kubectl edit ct " + tierName + " -n " + appNS, "live config: every pod applies it"},
	} {
		fmt.Fprintf(tw, "  %s\t# %s\n", c[0], c[1])
	}
	tw.Flush()
	fmt.Fprintf(d.out, "\nThe manifests applied are in %s (tier.yaml, app.yaml);\nthe components' logs in %s.\n", d.dir, d.node.LogDir())
}
