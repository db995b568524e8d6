package testnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Teardown stops the node and removes everything it made: processes,
// cgroups, namespaces (with their links, routes, iptables rules and
// mounts), the work directory, and puts back the sysctls kubelet changed.
// It is idempotent; Start registers it with t.Cleanup, and Up's caller
// calls it.
func (n *Node) Teardown() error {
	n.once.Do(func() {
		if n.failed != nil && n.failed() {
			n.dumpLogs()
		}
		start := time.Now()
		n.mu.Lock()
		procs := append([]*proc(nil), n.procs...)
		n.mu.Unlock()
		// In stages, each at once: the node first, so nothing restarts
		// what goes next; the API server before etcd. The API server's
		// graceful shutdown outwaited 10 s every time (with etcd still
		// up): its state is thrown away, so it gets 2 s.
		var errs []error
		for _, stage := range []struct {
			names []string
			grace time.Duration
		}{
			{[]string{"kubelet", "kube-proxy"}, stopTimeout},
			{[]string{"containerd", "kube-controller-manager", "kube-scheduler"}, stopTimeout},
			{[]string{"kube-apiserver"}, 2 * time.Second},
			{nil, stopTimeout}, // the rest: etcd
		} {
			which := func(p *proc) bool { return stage.names == nil || slices.Contains(stage.names, p.name) }
			stopAll(procs, which, stage.grace, n.logf, &errs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		errs = append(errs, removeNode(ctx, n.l.work))
		n.teardownErr = errors.Join(errs...)
		n.logf("testnode: teardown took %.1fs", time.Since(start).Seconds())
		// Only now: a second ^C during the teardown waits for it (Once)
		// instead of killing the binary halfway.
		if n.stopSignals != nil {
			n.stopSignals()
		}
	})
	return n.teardownErr
}

func stopAll(procs []*proc, which func(*proc) bool, grace time.Duration, logf func(string, ...any), errs *[]error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range procs {
		if !which(p) {
			continue
		}
		wg.Go(func() {
			if err := p.stop(grace, logf); err != nil {
				mu.Lock()
				*errs = append(*errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// removeNode removes what the node with this work directory left on the
// machine, whether or not its processes are still running: it is both the
// end of a teardown and the sweep of a killed run.
func removeNode(ctx context.Context, work string) error {
	ns := newNamespaces(work)
	cgroup := "/" + filepath.Base(work)
	var errs []error
	if err := killAll(ctx, ns, cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := restoreSysctls(filepath.Join(work, "sysctls")); err != nil {
		errs = append(errs, err)
	}
	if err := ns.remove(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(work); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killAll SIGKILLs every process in the node's namespaces (components,
// containerd's shims) or its cgroups (containers), until none is left.
func killAll(ctx context.Context, ns namespaces, cgroup string) error {
	var want []string
	for _, p := range []string{ns.net, ns.mnt} {
		if !mounted(p) {
			continue
		}
		ino, err := nsInode(p)
		if err != nil {
			return err
		}
		want = append(want, strconv.FormatUint(ino, 10))
	}
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	for {
		pids := nodePids(want, cgroup)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v still alive %v after SIGKILL", pids, killTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodePids lists the processes whose network or mount namespace has one of
// the inodes, or that sit in the cgroup tree.
func nodePids(inodes []string, cgroup string) []int {
	seen := map[int]bool{}
	self := os.Getpid()
	if len(inodes) > 0 {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			for _, kind := range []string{"net", "mnt"} {
				link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", kind))
				if err != nil {
					continue
				}
				for _, ino := range inodes {
					if strings.HasSuffix(link, ":["+ino+"]") {
						seen[pid] = true
					}
				}
			}
		}
	}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, cgroup), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for f := range strings.FieldsSeq(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers,
// the named systemd one and the unified one of a hybrid setup).
func cgroupHierarchies() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var hs []string
	for line := range strings.Lines(string(b)) {
		_, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(line)
		if !ok || len(f) < 5 {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			hs = append(hs, unescapeMount(f[4]))
		}
	}
	return hs
}

// removeCgroups removes the cgroup tree in every hierarchy, deepest first
// (a cgroup whose last process just died can be busy for a moment).
func removeCgroups(ctx context.Context, cgroup string) error {
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	for {
		var left []string
		for _, h := range cgroupHierarchies() {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(h, cgroup), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, dirs[i])
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroups not removed: %v", left)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sysctls that kubelet sets machine-wide (they are not per namespace)
// unless protectKernelDefaults, which would instead refuse to start on
// this machine's values.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// saveSysctls writes the machine's values of kubeletSysctls to file: a
// live node's saved ones when there is one (sysctls.go).
func saveSysctls(file string) error {
	return withSysctlLock(func() error {
		if other := liveSysctls(filepath.Dir(file)); other != "" {
			b, err := os.ReadFile(other)
			if err != nil {
				return err
			}
			return os.WriteFile(file, b, 0o644)
		}
		return readSysctls(file)
	})
}

func readSysctls(file string) error {
	var b strings.Builder
	for _, s := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s=%s\n", s, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// restoreSysctls puts file's values back, unless another node still
// lives: the last one does (sysctls.go).
func restoreSysctls(file string) error {
	return withSysctlLock(func() error {
		if liveSysctls(filepath.Dir(file)) != "" {
			return nil
		}
		return writeSysctls(file)
	})
}

func writeSysctls(file string) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || !strings.HasPrefix(k, "vm/") && !strings.HasPrefix(k, "kernel/") || strings.Contains(k, "..") {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sweep removes the nodes of test binaries that died without a teardown:
// work directories and cgroups named with the prefix whose process is gone
// (with their processes, namespaces and the sysctls they changed). Start
// runs it first; a test that looks at the machine before Start runs it
// before looking.
func Sweep(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sweep(ctx, t.Logf)
}

func sweep(ctx context.Context, logf func(string, ...any)) {
	stale := map[string]bool{}
	if m, err := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*")); err == nil {
		for _, w := range m {
			stale[filepath.Base(w)] = true
		}
	}
	for _, h := range cgroupHierarchies() {
		if m, err := filepath.Glob(filepath.Join(h, prefix+"*")); err == nil {
			for _, c := range m {
				stale[filepath.Base(c)] = true
			}
		}
	}
	for name := range stale {
		pid, err := strconv.Atoi(strings.TrimPrefix(name, prefix))
		if err != nil || alive(pid) {
			continue
		}
		logf("testnode: sweeping the node of a killed run (pid %d)", pid)
		if err := removeNode(ctx, filepath.Join(os.TempDir(), name)); err != nil {
			logf("testnode: sweeping %s: %v", name, err)
		}
	}
}

// alive says whether pid is a running process (a recycled pid counts as
// alive: the sweep then leaves that node to a later run).
func alive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// insecureTLS is for the components' own healthz endpoints only, whose
// certificates they make themselves at start.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // see above
}
