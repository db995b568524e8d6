package testnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one component, run inside the node's namespaces through nsenter
// (which execs it: the pid is the component's). Its output goes to
// <work>/logs/<name>.log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once cmd has exited and been reaped
	err  error         // cmd.Wait's, once done is closed
}

func startProc(ns namespaces, work, name string, env []string, args ...string) (*proc, error) {
	log := filepath.Join(work, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line := ns.enter(args...)
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = work
	cmd.Env = append(os.Environ(), env...)
	// The kernel kills the component when the test binary dies without
	// running its cleanups (a node left by that is swept at the next
	// start); its own process group, so a ^C at the terminal reaches the
	// test's handler first and the teardown stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited says whether the process has exited, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM, then SIGKILL after grace; it returns once the
// process has been reaped (or killTimeout after the SIGKILL). It says
// when it had to kill, unless grace was meant to be short.
func (p *proc) stop(grace time.Duration, logf func(string, ...any)) error {
	if done, _ := p.exited(); done {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if grace >= stopTimeout {
		logf("testnode: %s did not exit %v after SIGTERM: killing it", p.name, grace)
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("%s (pid %d) did not exit %v after SIGKILL", p.name, p.cmd.Process.Pid, killTimeout)
	}
}

// tail is the end of the process's log, for a failure message.
func (p *proc) tail(lines int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
