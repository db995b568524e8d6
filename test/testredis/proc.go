package testredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds on every wait in this package.
const (
	readyTimeout = 15 * time.Second // a started process answers PING
	stopTimeout  = 10 * time.Second // a SIGTERMed process exits
	killTimeout  = 5 * time.Second  // a SIGKILLed process is reaped
	portAttempts = 5                // fresh ports tried when start-up loses a port race
)

// proc is one redis-server process (a server or a sentinel) that can be
// stopped and started again on the same port with the same directory.
type proc struct {
	t        testing.TB
	bin      string
	dir      string
	password string
	// busPort: the port+10000 cluster bus port must be free too.
	busPort bool
	// args returns redis-server's arguments for a port; it may write
	// files into dir (the sentinel's config).
	args func(port int) ([]string, error)

	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and been reaped
}

func newProc(t testing.TB, dir, password string, args func(int) ([]string, error)) *proc {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, bin: bin, dir: dir, password: password, args: args}
	// Registered after t.TempDir (by the caller), so it runs before the
	// directory is removed.
	t.Cleanup(func() {
		if err := p.kill(); err != nil {
			t.Errorf("testredis: %v", err)
		}
	})
	return p
}

func (p *proc) addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

// start launches the process on a fresh free port, trying another port
// when the process exits during start-up (another process may take a port
// between our probe and redis-server's bind).
func (p *proc) start() error {
	var last error
	for range portAttempts {
		port, err := freePort(p.busPort)
		if err != nil {
			return err
		}
		err = p.launch(port)
		if err == nil {
			return nil
		}
		last = err
		if !errors.Is(err, errExited) {
			return err
		}
	}
	return fmt.Errorf("gave up after %d ports: %w", portAttempts, last)
}

var errExited = errors.New("redis-server exited during start-up")

// launch starts the process on port and waits until it answers PING.
func (p *proc) launch(port int) error {
	args, err := p.args(port)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(p.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Dir = p.dir
	// An *os.File goes to the child as is: no copying goroutine.
	cmd.Stdout, cmd.Stderr = out, out
	setDeathSignal(cmd)
	err = cmd.Start()
	out.Close()
	if err != nil {
		return fmt.Errorf("starting %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.port, p.cmd, p.done = port, cmd, done
	p.mu.Unlock()

	if err := p.waitReady(); err != nil {
		_ = p.kill()
		return err
	}
	return nil
}

func (p *proc) waitReady() error {
	addr := p.addr()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("%w (port %s)\n%s", errExited, addr, p.logs())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		_, last = do(ctx, addr, p.password, "PING")
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s (last error: %v)\n%s", addr, readyTimeout, last, p.logs())
}

// logs returns the tail of the process's log files, for error messages.
func (p *proc) logs() string {
	var s string
	for _, name := range []string{"stdout.log", "redis.log"} {
		if b, err := os.ReadFile(filepath.Join(p.dir, name)); err == nil && len(b) > 0 {
			s += "--- " + name + ":\n" + tail(string(b), 1500) + "\n"
		}
	}
	return s
}

// signal sends sig to the running process; it is a no-op when none runs.
func (p *proc) signal(sig os.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v to redis-server %d: %w", sig, cmd.Process.Pid, err)
	}
	return nil
}

// wait waits at most d for the process to have exited.
func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// stop ends the process with SIGTERM (SIGCONT too, in case it is paused),
// falling back to SIGKILL.
func (p *proc) stop() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if p.wait(stopTimeout) {
		return nil
	}
	return p.kill()
}

func (p *proc) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(killTimeout) {
		return fmt.Errorf("redis-server on %s still running %s after SIGKILL", p.addr(), killTimeout)
	}
	return nil
}

// restart stops the process and starts it again on the same port.
func (p *proc) restart() error {
	if err := p.stop(); err != nil {
		return err
	}
	p.mu.Lock()
	port := p.port
	p.mu.Unlock()
	return p.launch(port)
}

// freePort returns a loopback port that nothing listens on now; with bus,
// port+10000 (Redis Cluster's bus port) is free as well.
func freePort(bus bool) (int, error) {
	for range 100 {
		port, err := listenFree(0)
		if err != nil {
			return 0, err
		}
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		if _, err := listenFree(port + 10000); err == nil {
			return port, nil
		}
	}
	return 0, errors.New("testredis: no free loopback port found")
}

// listenFree binds 127.0.0.1:port (0: any) and releases it at once.
func listenFree(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns at most the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
