package testnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// namespaces are the node's network and mount namespaces, each kept alive
// by a bind mount of its nsfs file under dir (a private bind mount of its
// own, as unshare requires for a persistent namespace).
type namespaces struct {
	dir string // <work>/ns, bind-mounted onto itself
	net string // <dir>/net
	mnt string // <dir>/mnt
}

func newNamespaces(work string) namespaces {
	dir := filepath.Join(work, "ns")
	return namespaces{dir: dir, net: filepath.Join(dir, "net"), mnt: filepath.Join(dir, "mnt")}
}

// create makes both namespaces and sets the mount namespace's /var and /run
// up as the node's own (directories in work), so that nothing the node
// writes there reaches the machine's.
func (ns namespaces) create(ctx context.Context, work string) error {
	for _, d := range []string{ns.dir, filepath.Join(work, "var/lib"), filepath.Join(work, "var/log"), filepath.Join(work, "var/tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Symlink("/run", filepath.Join(work, "var/run")); err != nil {
		return err
	}
	steps := [][]string{
		{"mount", "--bind", ns.dir, ns.dir},
		{"mount", "--make-private", ns.dir},
		{"touch", ns.net, ns.mnt},
		{"unshare", "--net=" + ns.net, "--mount=" + ns.mnt, "--propagation", "private", "true"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return err
		}
	}
	inside := [][]string{
		{"mount", "--bind", filepath.Join(work, "var"), "/var"},
		{"mount", "-t", "tmpfs", "-o", "mode=755", "tiercache-node-run", "/run"},
	}
	for _, s := range inside {
		if err := run(ctx, ns.enter(s...)...); err != nil {
			return err
		}
	}
	return nil
}

// enter wraps a command line so that it runs inside the namespaces.
func (ns namespaces) enter(args ...string) []string {
	return append([]string{"nsenter", "--net=" + ns.net, "--mount=" + ns.mnt, "--"}, args...)
}

// remove unmounts the namespaces' files; the namespaces end once nothing
// runs in them any more.
func (ns namespaces) remove(ctx context.Context) error {
	var errs []error
	for _, p := range []string{ns.net, ns.mnt, ns.dir} {
		if mounted(p) {
			if err := run(ctx, "umount", p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// mounted says whether path is a mount point in this process's mount
// namespace.
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == path {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// nsInode is the inode of a namespace file (an nsfs bind mount or
// /proc/PID/ns/X): equal inodes, same namespace.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// dial opens a connection from inside the network namespace at path: a
// goroutine locks its OS thread, enters the namespace, dials, and goes
// back to the thread's own namespace before unlocking. (A thread that
// cannot go back stays locked, so Go ends it with the goroutine; ending
// threads is otherwise avoided: a child's Pdeathsig fires when the thread
// that started it ends, and any thread may have started a component.) The
// socket stays in the namespace it was made in, whichever thread uses it
// afterwards. addr must be an IP address and port: name resolution would
// run elsewhere.
func dial(ctx context.Context, path, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, back, err := dialLocked(ctx, path, network, addr)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// dialLocked runs on a locked thread; back says whether the thread is in
// its own network namespace again.
func dialLocked(ctx context.Context, path, network, addr string) (c net.Conn, back bool, err error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, err
	}
	defer own.Close()
	f, err := os.Open(path)
	if err != nil {
		return nil, true, err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("setns %s: %w", path, err)
	}
	var d net.Dialer
	c, err = d.DialContext(ctx, network, addr)
	back = unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil
	return c, back, err
}

// run runs a helper command, bounded by commandTimeout, and returns its
// output in the error when it fails.
func run(ctx context.Context, args ...string) error {
	_, err := output(ctx, args...)
	return err
}

func output(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
