package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
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
	d.say("2. The second is a hit: from the pod's own L1, or from L2 (Redis) when kube-proxy picked the other pod")
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

// tryIt prints how to reach the cluster from another terminal.
func (d *demo) tryIt() {
	plugin, _ := filepath.Abs(d.cfg.plugin)
	kc := d.node.Kubeconfig()
	path := filepath.Dir(d.kubectl) + ":" + filepath.Dir(plugin)
	fmt.Fprintf(d.out, `
== Try it yourself, as root in another terminal. Everything of the cluster
   lives in the network namespace %[1]s,
   so enter it first (a shell there sees the cluster; nothing else is changed):

  nsenter --net=%[1]s env KUBECONFIG=%[2]s PATH=%[3]s:"$PATH" bash

  kubectl get pods -A                                   # operator, Redis, CoreDNS, the demo app
  kubectl get ct -n %[4]s                                  # the tier: READY, PODS, CURRENT
  kubectl get pod -n %[4]s -l app=%[5]s -o jsonpath='{.items[0].spec.initContainers[*].name}'  # the injected sidecar
  curl -si %[6]s/hello                             # X-Cache: HIT; layer=l1 or l2
  curl -si %[6]s/time                              # max-age=5: watch it turn stale
  curl -si %[6]s/private                           # Cache-Control: private: never stored
  kubectl tiercache status %[7]s -n %[4]s                     # per pod: config, hit ratio, L2
  kubectl tiercache purge %[7]s -n %[4]s --url /hello
  kubectl tiercache explain %[7]s -n %[4]s /hello
  kubectl logs -n %[4]s deploy/%[5]s -c tiercache
  kubectl edit ct %[7]s -n %[4]s                               # live config: every pod applies it

The manifests applied are in %[8]s (tier.yaml, app.yaml);
the components' logs in %[9]s.
`, d.node.NetNS(), kc, path, appNS, appName, d.svcURL, tierName, d.dir, d.node.LogDir())
}
