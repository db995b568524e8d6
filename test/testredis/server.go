package testredis

import (
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Option configures a server started by Start or StartCluster.
type Option func(*options)

type options struct {
	password string
	args     []string
}

// WithPassword starts the server with requirepass.
func WithPassword(password string) Option {
	return func(o *options) { o.password = password }
}

// WithArgs appends redis-server command-line arguments, e.g.
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Server is one redis-server process. Its methods fail the test on error,
// so call them from the test's goroutine.
type Server struct {
	p *proc
}

// Start starts a standalone redis-server on a free loopback port with no
// persistence and its directory under t.TempDir(). It is killed when the
// test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s := newServer(t, o, nil)
	if err := s.p.start(); err != nil {
		t.Fatalf("testredis: %v", err)
	}
	return s
}

// newServer prepares a server without starting it; extra arguments come
// before the caller's so that WithArgs can override them.
func newServer(t testing.TB, o options, extra func(dir string) []string) *Server {
	t.Helper()
	dir := t.TempDir()
	args := func(port int) ([]string, error) {
		a := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"),
			"--daemonize", "no",
		}
		if o.password != "" {
			a = append(a, "--requirepass", o.password)
		}
		if extra != nil {
			a = append(a, extra(dir)...)
		}
		return append(a, o.args...), nil
	}
	return &Server{p: newProc(t, dir, o.password, args)}
}

// Addr is the server's host:port (127.0.0.1), the same across Restart.
func (s *Server) Addr() string { return s.p.addr() }

// Stop ends the server with SIGTERM and waits for it to exit (SIGKILL
// after 10 s).
func (s *Server) Stop() {
	s.p.t.Helper()
	if err := s.p.stop(); err != nil {
		s.p.t.Fatalf("testredis: %v", err)
	}
}

// Kill ends the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	s.p.t.Helper()
	if err := s.p.kill(); err != nil {
		s.p.t.Fatalf("testredis: %v", err)
	}
}

// Pause stops the process (SIGSTOP): connections are still accepted by the
// kernel, but nothing answers — a hung server.
func (s *Server) Pause() {
	s.p.t.Helper()
	if err := s.p.signal(syscall.SIGSTOP); err != nil {
		s.p.t.Fatalf("testredis: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.p.t.Helper()
	if err := s.p.signal(syscall.SIGCONT); err != nil {
		s.p.t.Fatalf("testredis: %v", err)
	}
}

// Restart stops the server (if it runs) and starts it again on the same
// port with the same directory. Without persistence it comes back empty;
// a cluster node keeps its cluster configuration (nodes.conf).
func (s *Server) Restart() {
	s.p.t.Helper()
	if err := s.p.restart(); err != nil {
		s.p.t.Fatalf("testredis: restart: %v", err)
	}
}
