package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/test/testredis"
)

// purgeAnswer is a sidecar's answer to a purge.
type purgeAnswer struct {
	Purged int    `json:"purged"`
	L1     int    `json:"l1"`
	L2     *int   `json:"l2"`
	Error  string `json:"error"`
}

// purgeJSON decodes the plugin's -o json output of a purge.
func purgeJSON(t *testing.T, r result) (purgeReport, []purgeAnswer) {
	t.Helper()
	var rep purgeReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("purge -o json printed %q (err %v): %v", r.out, r.err, err)
	}
	out := make([]purgeAnswer, len(rep.Answers))
	for i, a := range rep.Answers {
		if len(a.Answer) > 0 {
			if err := json.Unmarshal(a.Answer, &out[i]); err != nil {
				t.Fatalf("answer of %s: %v", a.Sidecar, err)
			}
		}
	}
	return rep, out
}

func sidecars(rep purgeReport) []string {
	var out []string
	for _, a := range rep.Answers {
		out = append(out, a.Sidecar)
	}
	return out
}

func TestPurgeSendsTheTiersTokenToTheSidecarAtAnAddress(t *testing.T) {
	ns := namespace(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	generatedSecret(t, tier, "token-of-web-0123456789")
	o := newOrigin(t)
	sc := startSidecar(t, o.URL, "127.0.0.1", "token-of-web-0123456789", smallL1)

	cases := []struct {
		name, path string
		flags      []string
	}{
		{"a purge by origin-form URL", "/byurl/x", []string{"--url", "/byurl/x"}},
		{"a purge by absolute URL", "/byabs/x", []string{"--url", "http://" + sc.serve + "/byabs/x"}},
		{"a purge by prefix", "/byprefix/x", []string{"--prefix", "/byprefix/"}},
		{"a purge by tag", "/bytag/x", []string{"--tag", "tag-bytag"}},
		{"a purge of everything", "/byall/x", []string{"--all"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := sc
			if c.flags[0] == "--all" {
				// A purge of everything takes a whole burst of the
				// sidecar's rate limit: one that purged nothing yet.
				sc = startSidecar(t, o.URL, "127.0.0.1", "token-of-web-0123456789", smallL1)
			}
			sc.expect(t, c.path, "MISS")
			sc.expect(t, c.path, "HIT")
			r := run(t, Options{}, append([]string{"purge", "web", "-n", ns, "--address", sc.admin, "-o", "json"}, c.flags...)...)
			if r.err != nil {
				t.Fatalf("purge %v: %v (printed %s)", c.flags, r.err, r.out)
			}
			rep, as := purgeJSON(t, r)
			if len(rep.Answers) != 1 || rep.Answers[0].Status != http.StatusOK || rep.Answers[0].Sidecar != sc.admin || as[0].Purged < 1 {
				t.Fatalf("purge %v: answers %+v %+v, want one 200 from %s with purged >= 1", c.flags, rep.Answers, as, sc.admin)
			}
			if rep.Tier != ns+"/web" {
				t.Fatalf("report names tier %q, want %s/web", rep.Tier, ns)
			}
			sc.expect(t, c.path, "MISS")
		})
	}

	t.Run("the table says what the sidecar answered", func(t *testing.T) {
		sc.expect(t, "/table", "MISS")
		r := run(t, Options{}, "purge", "web", "-n", ns, "--address", sc.admin, "--url", "/table")
		if r.err != nil {
			t.Fatal(r.err)
		}
		lines := strings.Split(strings.TrimSpace(r.out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "SIDECAR") ||
			!strings.Contains(lines[1], sc.admin) || !strings.Contains(lines[1], " 200 ") || !strings.Contains(lines[1], `{"purged":1,"l1":1,"bodies":0,"soft":false}`) {
			t.Fatalf("purge printed:\n%s\nwant a header and one line with %s, 200 and the sidecar's answer", r.out, sc.admin)
		}
	})
}

func TestPurgeUsesTheTokenSecretTheTierNames(t *testing.T) {
	ns := namespace(t)
	c := needCluster(t)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "purge", Labels: map[string]string{inject.LabelAllowReference: "true"}},
		Data:       map[string][]byte{"token": []byte("a-token-of-our-own-42")},
	}
	if err := c.Create(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{
		TokenSecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "purge"}, Key: "token"},
	}})
	// The generated Secret's token is not the tier's when it names one.
	generatedSecret(t, tier, "the-generated-token-0000")
	o := newOrigin(t)
	sc := startSidecar(t, o.URL, "127.0.0.1", "a-token-of-our-own-42", smallL1)
	sc.expect(t, "/a", "MISS")
	r := run(t, Options{}, "purge", "web", "-n", ns, "--address", sc.admin, "--url", "/a", "-o", "json")
	if r.err != nil {
		t.Fatalf("purge: %v (printed %s)", r.err, r.out)
	}
	sc.expect(t, "/a", "MISS")
}

func TestPurgeFailsWhenTheSidecarRefusesTheToken(t *testing.T) {
	ns := namespace(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	generatedSecret(t, tier, "not-the-sidecars-token-00")
	o := newOrigin(t)
	sc := startSidecar(t, o.URL, "127.0.0.1", "the-sidecars-own-token-11", smallL1)
	sc.expect(t, "/a", "MISS")

	r := run(t, Options{}, "purge", "web", "-n", ns, "--address", sc.admin, "--url", "/a")
	if r.code() != 1 || !strings.Contains(r.err.Error(), "failed on 1 of 1") {
		t.Fatalf("purge with a token the sidecar refuses: exit %d, err %v; want 1 naming the failed sidecar", r.code(), r.err)
	}
	if !strings.Contains(r.out, " 401 ") || !strings.Contains(r.out, "a valid bearer token is required") {
		t.Fatalf("purge printed:\n%s\nwant the sidecar's 401 and its message", r.out)
	}
	sc.expect(t, "/a", "HIT")
}

func TestPurgeTakesTheTokenFromAFileAndNeedsNoCluster(t *testing.T) {
	o := newOrigin(t)
	sc := startSidecar(t, o.URL, "127.0.0.1", "token-in-a-file-000000", smallL1)
	sc.expect(t, "/f", "MISS")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("token-in-a-file-000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// No kubeconfig at all: a standalone sidecar.
	r := runWithout(t, "purge", "standalone", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--address", sc.admin, "--purge-token-file", file, "--url", "/f")
	if r.err != nil {
		t.Fatalf("purge with --purge-token-file: %v (printed %s)", r.err, r.out)
	}
	sc.expect(t, "/f", "MISS")

	t.Run("--soft marks instead of removing and the answer says so", func(t *testing.T) {
		sc.expect(t, "/s", "MISS")
		sc.expect(t, "/s", "HIT")
		r := runWithout(t, "purge", "standalone", "--address", sc.admin, "--purge-token-file", file, "--url", "/s", "--soft")
		if r.err != nil {
			t.Fatalf("purge --soft: %v (printed %s)", r.err, r.out)
		}
		if !strings.Contains(r.out, `{"purged":1,"l1":1,"bodies":0,"soft":true}`) {
			t.Fatalf("purge --soft printed:\n%s\nwant the sidecar's soft answer", r.out)
		}
		// Stale now: no fresh hit (the origin gives no validator or stale
		// window, so it is fetched again).
		sc.expect(t, "/s", "MISS")
	})

	t.Run("a sidecar without a token takes a purge with --no-token from its loopback", func(t *testing.T) {
		open := startSidecar(t, o.URL, "127.0.0.1", "", smallL1)
		open.expect(t, "/g", "MISS")
		r := runWithout(t, "purge", "standalone", "--address", open.admin, "--no-token", "--url", "/g")
		if r.err != nil {
			t.Fatalf("purge --no-token: %v (printed %s)", r.err, r.out)
		}
		open.expect(t, "/g", "MISS")
	})
}

// runWithout runs the plugin without the test cluster's kubeconfig.
func runWithout(t *testing.T, args ...string) result {
	t.Helper()
	return runArgs(t, Options{}, args...)
}

func TestPurgeNamesWhatIsMissing(t *testing.T) {
	ns := namespace(t)
	c := needCluster(t)
	ref := func(name string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "token"}
	}
	createTier(t, ns, "no-secret", v1alpha1.CacheTierSpec{})
	squatted := createTier(t, ns, "squatted", v1alpha1.CacheTierSpec{})
	if err := c.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: inject.GeneratedSecretName(squatted.Name), Labels: map[string]string{inject.LabelAllowReference: "true"}},
		Data:       map[string][]byte{inject.KeyPurgeToken: []byte("chosen-by-someone-else")},
	}); err != nil {
		t.Fatal(err)
	}
	keyless := createTier(t, ns, "keyless", v1alpha1.CacheTierSpec{})
	generatedSecret(t, keyless, "x")
	var s corev1.Secret
	if err := c.Get(t.Context(), clientKey(ns, inject.GeneratedSecretName("keyless")), &s); err != nil {
		t.Fatal(err)
	}
	delete(s.Data, inject.KeyPurgeToken)
	if err := c.Update(t.Context(), &s); err != nil {
		t.Fatal(err)
	}
	createTier(t, ns, "ref-missing", v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("absent")}})
	if err := c.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unlabelled"},
		Data:       map[string][]byte{"token": []byte("a-token-of-our-own-42")},
	}); err != nil {
		t.Fatal(err)
	}
	createTier(t, ns, "ref-unlabelled", v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("unlabelled")}})

	cases := []struct {
		name, tier string
		want       []string
	}{
		{"a tier that does not exist", "nope", []string{`CacheTier "nope" not found in namespace "` + ns + `"`}},
		{"a tier whose generated Secret does not exist", "no-secret", []string{"Secret " + ns + "/no-secret-tiercache not found", "is the operator running?"}},
		{"a Secret of the generated name that the operator did not generate", "squatted", []string{"squatted-tiercache", "not generated for this CacheTier"}},
		{"a generated Secret without the purge-token key", "keyless", []string{"keyless-tiercache", `has no key "purge-token"`}},
		{"a named token Secret that does not exist", "ref-missing", []string{"Secret " + ns + "/absent", "spec.purge.tokenSecretRef", "not found"}},
		{"a named token Secret without the allow label", "ref-unlabelled", []string{"Secret " + ns + "/unlabelled", "not labelled tiercache.io/allow-reference=true"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The address is never reached: nothing is sent without the token.
			r := run(t, Options{}, "purge", tc.tier, "-n", ns, "--address", "127.0.0.1:1", "--url", "/a")
			if r.code() != 1 {
				t.Fatalf("exit code %d (err %v), want 1", r.code(), r.err)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.err.Error(), w) {
					t.Errorf("error %q does not say %q", r.err, w)
				}
			}
			if r.out != "" {
				t.Errorf("printed %q, want nothing: no purge was sent", r.out)
			}
		})
	}
}

func TestPurgeCommandLinesThatCannotRunAreUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "a command is required"},
		{"an unknown command", []string{"prune", "web"}, `unknown command "prune"`},
		{"an unknown flag", []string{"purge", "web", "--url", "/a", "--urls", "/b"}, "unknown flag: --urls"},
		{"no tier", []string{"purge", "--url", "/a"}, "purge takes 1 argument(s), [TIER] (got 0)"},
		{"nothing to purge", []string{"purge", "web"}, "nothing to purge: give --url, --prefix, --tag or --all"},
		{"a soft purge of nothing", []string{"purge", "web", "--soft"}, "nothing to purge: give --url, --prefix, --tag or --all"},
		{"everything together with a URL", []string{"purge", "web", "--all", "--url", "/a"}, "--all purges everything and goes alone"},
		{"a URL of another scheme", []string{"purge", "web", "--url", "ftp://x/a"}, "--url[0]: scheme must be http or https"},
		{"a relative URL", []string{"purge", "web", "--url", "/a", "--url", "b"}, "--url[1]: must be absolute"},
		{"the root as a prefix", []string{"purge", "web", "--prefix", "/"}, `--prefix: "/" would purge everything`},
		{"a tag with a space", []string{"purge", "web", "--tag", "a b"}, "--tag[0]: must be a non-empty tag without spaces"},
		{"an address without a port", []string{"purge", "web", "--url", "/a", "--address", "localhost"}, "--address: must be host:port"},
		{"no token for the tier's pods", []string{"purge", "web", "--url", "/a", "--no-token"}, "--no-token needs --address"},
		{"an unknown output format", []string{"purge", "web", "--url", "/a", "-o", "yaml"}, `--output: must be "json" or empty`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, Options{}, c.args...)
			if r.code() != 2 || !strings.Contains(r.err.Error(), c.want) {
				t.Fatalf("kubectl tiercache %s: exit %d, err %v; want 2 and %q", strings.Join(c.args, " "), r.code(), r.err, c.want)
			}
		})
	}
}

func TestPurgeTargetsTheRunningSidecarsReadyOnesFirstWithL2(t *testing.T) {
	pod := func(name string, injected bool, phase corev1.PodPhase, ready, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase}}
		if phase != "" {
			p.Spec.NodeName = "node-1"
		}
		if injected {
			p.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName}}
		}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return p
	}
	pods := []corev1.Pod{
		pod("a-starting", true, corev1.PodRunning, false, false),
		pod("b-ready", true, corev1.PodRunning, true, false),
		pod("c-pending", true, corev1.PodPending, false, false),
		pod("d-plain", false, corev1.PodRunning, true, false),
		pod("e-leaving", true, corev1.PodRunning, true, true),
		pod("f-ready", true, corev1.PodRunning, true, false),
		pod("g-unscheduled", true, "", false, false),
		pod("h-unscheduled", true, corev1.PodPending, false, false),
	}
	pods[len(pods)-1].Spec.NodeName = ""
	skipped := []string{"c-pending: pending", "d-plain: not injected", "e-leaving: terminating", "g-unscheduled: not scheduled", "h-unscheduled: not scheduled"}
	cases := []struct {
		name string
		l2   bool
		want []string
	}{
		{"without L2 every running injected pod is a target, in name order", false, []string{"a-starting", "b-ready", "f-ready"}},
		{"with L2 the ready pods come first, since one is enough", true, []string{"b-ready", "f-ready", "a-starting"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			targets, sk := purgeTargets(pods, c.l2)
			var got []string
			for _, p := range targets {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, c.want) || !slices.Equal(sk, skipped) {
				t.Fatalf("targets %v skipped %v, want %v and %v", got, sk, c.want, skipped)
			}
		})
	}
}

func TestPurgeWithoutL2ReachesEveryPodOfTheTier(t *testing.T) {
	ip := podIP(t)
	ns := namespace(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	generatedSecret(t, tier, "token-of-web-0123456789")
	o := newOrigin(t)
	a := startSidecar(t, o.URL, ip, "token-of-web-0123456789", smallL1)
	b := startSidecar(t, o.URL, ip, "token-of-web-0123456789", smallL1)
	createPod(t, tier, "web-a", true, a.adminPort(t), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-b", true, b.adminPort(t), ip, corev1.PodRunning, false)
	createPod(t, tier, "web-c", true, 1, ip, corev1.PodPending, false)
	createPod(t, tier, "web-d", false, 0, "", "", false)
	for _, n := range []*node{a, b} {
		n.expect(t, "/page", "MISS")
		n.expect(t, "/page", "HIT")
	}

	r := run(t, Options{Pods: podsThroughAPIServer(t)}, "purge", "web", "-n", ns, "--url", "/page", "-o", "json")
	if r.err != nil {
		t.Fatalf("purge: %v (printed %s)", r.err, r.out)
	}
	rep, as := purgeJSON(t, r)
	if got := sidecars(rep); !slices.Equal(got, []string{"web-a", "web-b"}) {
		t.Fatalf("purged %v, want both running pods web-a and web-b", got)
	}
	for i, a := range rep.Answers {
		if a.Status != http.StatusOK || as[i].L1 != 1 {
			t.Fatalf("%s answered %d %+v, want 200 with one entry from L1", a.Sidecar, a.Status, as[i])
		}
	}
	if !slices.Equal(rep.Skipped, []string{"web-c: pending", "web-d: not injected"}) || rep.L2 == nil || *rep.L2 {
		t.Fatalf("skipped %v, l2 %v; want web-c (pending) and web-d (not injected), l2 false", rep.Skipped, rep.L2)
	}
	a.expect(t, "/page", "MISS")
	b.expect(t, "/page", "MISS")

	t.Run("a pod that does not answer fails the purge and is named", func(t *testing.T) {
		createPod(t, tier, "web-e", true, closedPort(t, ip), ip, corev1.PodRunning, true)
		a.expect(t, "/page", "HIT")
		r := run(t, Options{Pods: podsThroughAPIServer(t)}, "purge", "web", "-n", ns, "--url", "/page")
		if r.code() != 1 || !strings.Contains(r.err.Error(), "failed on 1 of 3 sidecar(s): web-e") {
			t.Fatalf("purge with a dead pod: exit %d, err %v; want 1 naming web-e", r.code(), r.err)
		}
		if !strings.Contains(r.out, "web-e") || !strings.Contains(r.out, "connection refused") {
			t.Fatalf("purge printed:\n%s\nwant web-e's connection error", r.out)
		}
		a.expect(t, "/page", "MISS")
	})
}

func TestPurgeWithL2GoesToTheFirstReadySidecarThatAnswersAndReachesEveryReplica(t *testing.T) {
	ip := podIP(t)
	ns := namespace(t)
	rs := testredis.Start(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{rs.Addr()}}})
	generatedSecret(t, tier, "token-of-web-0123456789")
	o := newOrigin(t)
	l2 := []string{"--redis-addr", rs.Addr(), "--tier", "web", "--pod-namespace", ns}
	a := startSidecar(t, o.URL, ip, "token-of-web-0123456789", smallL1, l2...)
	b := startSidecar(t, o.URL, ip, "token-of-web-0123456789", smallL1, l2...)
	// Sorted by name: a ready pod that does not answer, the ready one,
	// then a pod that is not ready yet.
	createPod(t, tier, "web-1-gone", true, closedPort(t, ip), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-2", true, b.adminPort(t), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-3", true, a.adminPort(t), ip, corev1.PodRunning, false)

	a.expect(t, "/page", "MISS")
	eventually(t, 5*time.Second, func() error {
		if x, _ := b.get(t, "/page"); !strings.HasPrefix(x, "HIT") {
			return fmt.Errorf("B answered %q, want a hit from L2", x)
		}
		return nil
	})
	a.expect(t, "/page", "HIT; layer=l1")
	b.expect(t, "/page", "HIT; layer=l1")

	r := run(t, Options{Pods: podsThroughAPIServer(t)}, "purge", "web", "-n", ns, "--url", "/page", "-o", "json")
	if r.err != nil {
		t.Fatalf("purge: %v (printed %s)", r.err, r.out)
	}
	rep, as := purgeJSON(t, r)
	if got := sidecars(rep); !slices.Equal(got, []string{"web-1-gone", "web-2"}) {
		t.Fatalf("purge went to %v, want web-1-gone (no answer) then web-2 only", got)
	}
	if rep.Answers[0].Error == "" || rep.Answers[1].Status != http.StatusOK || as[1].L2 == nil || *as[1].L2 < 1 {
		t.Fatalf("answers %+v %+v, want web-1-gone's error, then 200 from web-2 with entries from L2", rep.Answers, as)
	}
	// web-3 (sidecar A) was not asked; the purge reached it through L2
	// and the invalidation channel.
	for _, n := range []*node{a, b} {
		eventually(t, 5*time.Second, func() error {
			if x, body := n.get(t, "/page"); strings.HasSuffix(body, "v1") {
				return fmt.Errorf("%s still serves the purged response (X-Cache %q)", n.serve, x)
			}
			return nil
		})
	}

	t.Run("a refusal stops the purge: every sidecar of the tier would refuse it alike", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte("not-the-tiers-token-000"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := run(t, Options{Pods: podsThroughAPIServer(t)}, "purge", "web", "-n", ns, "--url", "/page", "--purge-token-file", file, "-o", "json")
		if r.code() != 1 || !strings.Contains(r.err.Error(), "sidecar web-2 refused the purge with 401") {
			t.Fatalf("purge with a wrong token: exit %d, err %v; want 1 naming web-2's 401", r.code(), r.err)
		}
		if rep, _ := purgeJSON(t, r); !slices.Equal(sidecars(rep), []string{"web-1-gone", "web-2"}) {
			t.Fatalf("purge went to %v, want no pod after web-2's refusal", sidecars(rep))
		}
	})

	t.Run("when L2 fails the purge goes to every pod and fails", func(t *testing.T) {
		rs.Stop()
		r := run(t, Options{Pods: podsThroughAPIServer(t)}, "purge", "web", "-n", ns, "--url", "/page", "-o", "json")
		if r.code() != 1 || !strings.Contains(r.err.Error(), "not L2 or the other replicas") {
			t.Fatalf("purge with L2 down: exit %d, err %v; want 1 saying L2 was not reached", r.code(), r.err)
		}
		rep, _ := purgeJSON(t, r)
		if got := sidecars(rep); !slices.Equal(got, []string{"web-1-gone", "web-2", "web-3"}) || rep.Answers[1].Status != http.StatusBadGateway {
			t.Fatalf("purge went to %v (answers %+v), want every pod after web-2's 502", got, rep.Answers)
		}
	})
}

// closedPort returns a port on ip where nothing listens.
func closedPort(t *testing.T, ip string) int32 {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return int32(port)
}

func TestPurgeDoesNotFollowARedirectWithTheToken(t *testing.T) {
	ns := namespace(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	generatedSecret(t, tier, "token-of-web-0123456789")
	leaked := make(chan string, 1)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case leaked <- r.Header.Get("Authorization"):
		default:
		}
		fmt.Fprint(w, `{"purged":0}`)
	}))
	defer elsewhere.Close()
	redirecting := httptest.NewServer(http.RedirectHandler(elsewhere.URL+"/purge", http.StatusTemporaryRedirect))
	defer redirecting.Close()

	r := run(t, Options{}, "purge", "web", "-n", ns, "--address", strings.TrimPrefix(redirecting.URL, "http://"), "--url", "/a", "-o", "json")
	select {
	case h := <-leaked:
		t.Fatalf("the redirect was followed: the other server got Authorization %q", h)
	default:
	}
	rep, _ := purgeJSON(t, r)
	if r.code() != 1 || len(rep.Answers) != 1 || rep.Answers[0].Status != http.StatusTemporaryRedirect {
		t.Fatalf("purge through a redirect: exit %d, answers %+v; want 1 and the 307 itself", r.code(), rep.Answers)
	}
}

// TestPurgeWaitsAShortRetryAfter: a purge of everything takes the whole
// burst of a sidecar's rate limit, so the next purge right after it is
// answered 429 with Retry-After. A short one (here 2s: a burst of 20 at
// 10/s) is waited and the purge sent again; a long one (10s) fails at
// once, naming the wait.
func TestPurgeWaitsAShortRetryAfter(t *testing.T) {
	o := newOrigin(t)
	const token = "rate-limited-token-0000"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	purge := func(t *testing.T, admin string, flags ...string) result {
		return run(t, Options{}, append([]string{"purge", "web", "--address", admin, "--purge-token-file", tokenFile}, flags...)...)
	}

	t.Run("a short Retry-After is waited", func(t *testing.T) {
		sc := startSidecar(t, o.URL, "127.0.0.1", token, smallL1, "--purge-rate", "10", "--purge-burst", "20")
		if r := purge(t, sc.admin, "--all"); r.err != nil {
			t.Fatalf("first purge --all: %v\n%s", r.err, r.out)
		}
		sc.expect(t, "/after", "MISS")
		sc.expect(t, "/after", "HIT")
		start := time.Now()
		r := purge(t, sc.admin, "--all")
		if r.err != nil {
			t.Fatalf("purge --all right after another: exit %d, %v\n%s\nwant it to wait the sidecar's Retry-After and succeed", r.code(), r.err, r.out)
		}
		if waited := time.Since(start); waited < time.Second {
			t.Errorf("the second purge returned after %s: it cannot have waited the 2s Retry-After", waited)
		}
		if !strings.Contains(r.out, " 200 ") {
			t.Errorf("purge printed:\n%s\nwant the sidecar's 200", r.out)
		}
		sc.expect(t, "/after", "MISS")
	})

	t.Run("a long Retry-After fails at once and names the wait", func(t *testing.T) {
		sc := startSidecar(t, o.URL, "127.0.0.1", token, smallL1, "--purge-rate", "0.1", "--purge-burst", "1")
		if r := purge(t, sc.admin, "--all"); r.err != nil {
			t.Fatalf("first purge --all: %v\n%s", r.err, r.out)
		}
		start := time.Now()
		r := purge(t, sc.admin, "--url", "/x")
		if r.code() != 1 {
			t.Fatalf("purge over a 10s Retry-After: exit %d (%v), want 1", r.code(), r.err)
		}
		if time.Since(start) > 4*time.Second {
			t.Errorf("the purge took %s: a Retry-After over 5s must not be waited", time.Since(start))
		}
		for _, want := range []string{"rate limited", "wait 10s"} {
			if !strings.Contains(r.err.Error(), want) || !strings.Contains(r.out, want) {
				t.Errorf("error %q and output %q: want both to name %q", r.err, r.out, want)
			}
		}
		if !strings.Contains(r.out, " 429 ") {
			t.Errorf("purge printed:\n%s\nwant the sidecar's 429", r.out)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		header string
		want   time.Duration
	}{
		"seconds are a delay":               {"2", 2 * time.Second},
		"zero seconds is no wait":           {"0", 0},
		"an HTTP-date is the wait until it": {now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second},
		"an HTTP-date past is no wait":      {now.Add(-time.Minute).Format(http.TimeFormat), 0},
		"no header is unknown":              {"", -1},
		"a negative number is unknown":      {"-1", -1},
		"a fraction is unknown (RFC 9110)":  {"1.5", -1},
		"a number past 2^31 is unknown":     {"99999999999", -1},
		"anything else is unknown":          {"soon", -1},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := retryAfter(c.header, now); got != c.want {
				t.Errorf("retryAfter(%q) = %s, want %s", c.header, got, c.want)
			}
		})
	}
}
