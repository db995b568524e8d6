//go:build linux

// Command gofloor is the least a Go HTTP/1.1 server can do per file hit,
// for docs/benchmarks.md: it reads requests (finding only where each
// ends), and answers each with a fixed response header, sent with
// MSG_MORE, and the same body file, sent with sendfile from one shared
// descriptor, as the sidecar sends a file-backed hit. It parses nothing,
// looks nothing up and keeps no state; its CPU per request is the floor
// under any Go server on the runtime's netpoller, against which the
// sidecar's and nginx's are measured. It is tooling, not part of the
// product, and serves nothing but 127.0.0.1.
//
// With --net-http it is instead the least a net/http server does per
// file hit: a handler that sets the same header fields and copies the
// body file into the ResponseWriter, which net/http sends with sendfile.
// Each connection has a descriptor of its own (sendfile there sends from
// the descriptor's offset), rewound per request. Between the two modes
// lies what net/http itself costs per request, before any handler work.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("gofloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on (loopback only)")
	size := fs.Int("size", 100<<10, "body size in bytes")
	dir := fs.String("dir", os.TempDir(), "directory for the body file (a tmpfs, as the sidecar's body store in the benchmark)")
	withNetHTTP := fs.Bool("net-http", false, "serve through net/http (a handler copying the file into the ResponseWriter) instead of the bare loop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("--listen %q: must be a loopback address and port", *listen)
	}
	if *size < 1 {
		return fmt.Errorf("--size: must be at least 1, got %d", *size)
	}
	f, err := os.CreateTemp(*dir, "gofloor-*.body")
	if err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte("x"), *size)); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	if *withNetHTTP {
		fmt.Fprintf(stderr, "gofloor: serving %d-byte hits through net/http on %s\n", *size, ln.Addr())
		return serveNetHTTP(ctx, ln, f.Name(), int64(*size))
	}
	fmt.Fprintf(stderr, "gofloor: serving %d-byte hits on %s\n", *size, ln.Addr())
	return serve(ctx, ln, int(f.Fd()), int64(*size))
}

// hitHeader is the header of every answer: the fields a sidecar hit
// carries, but for those that vary per response.
func hitHeader(size int64) http.Header {
	return http.Header{
		"Content-Type":   {"application/octet-stream"},
		"Content-Length": {strconv.FormatInt(size, 10)},
		"Cache-Control":  {"max-age=3600"},
		"Age":            {"0"},
		"Via":            {"1.1 gofloor"},
		"X-Cache":        {"HIT; layer=l1"},
	}
}

type connFile struct{}

// serveNetHTTP answers every request on every connection of ln through
// net/http with the size bytes of the file at path, until ctx ends. Each
// connection opens the file once; a request rewinds it and copies it into
// the ResponseWriter, which sends it with sendfile.
func serveNetHTTP(ctx context.Context, ln net.Listener, path string, size int64) error {
	hdr := hitHeader(size)
	var files sync.Map // net.Conn → *os.File, to close a connection's file with it
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			f, err := os.Open(path)
			if err != nil {
				return ctx
			}
			files.Store(c, f)
			return context.WithValue(ctx, connFile{}, f)
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, ok := r.Context().Value(connFile{}).(*os.File)
			if !ok {
				http.Error(w, "no body file", http.StatusInternalServerError)
				return
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			h := w.Header()
			for k, v := range hdr {
				h[k] = v
			}
			_, _ = io.Copy(w, f)
		}),
	}
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			if f, ok := files.LoadAndDelete(c); ok {
				_ = f.(*os.File).Close()
			}
		}
	}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	err := srv.Serve(ln)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serve answers every request on every connection of ln with the body of
// size bytes in file fd, until ctx ends.
func serve(ctx context.Context, ln net.Listener, fd int, size int64) error {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	_ = hitHeader(size).Write(&b)
	b.WriteString("\r\n")
	hdr := b.Bytes()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			_ = answer(c.(*net.TCPConn), hdr, fd, size)
		}()
	}
}

// answer reads requests from c (ending at an empty line; requests with
// bodies are not expected) and answers each, until the client leaves.
func answer(c *net.TCPConn, hdr []byte, fd int, size int64) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, 8<<10)
	have := 0
	for {
		n, err := c.Read(buf[have:])
		if err != nil {
			return err
		}
		have += n
		for {
			end := bytes.Index(buf[:have], []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			have = copy(buf, buf[end+4:have])
			if err := send(rc, hdr, fd, size); err != nil {
				return err
			}
		}
		if have == len(buf) {
			return errors.New("a request header larger than the buffer")
		}
	}
}

// send writes hdr with MSG_MORE, then size bytes of fd from offset 0
// with sendfile, waiting on the netpoller whenever the socket is full.
func send(rc syscall.RawConn, hdr []byte, fd int, size int64) error {
	var werr error
	sent, off := 0, int64(0)
	err := rc.Write(func(s uintptr) bool {
		for sent < len(hdr) {
			n, err := syscall.SendmsgN(int(s), hdr[sent:], nil, nil, syscall.MSG_MORE|syscall.MSG_NOSIGNAL)
			switch err {
			case nil:
				sent += n
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				werr = err
				return true
			}
		}
		for off < size {
			o := off
			n, err := syscall.Sendfile(int(s), fd, &o, int(size-off))
			off += int64(max(n, 0))
			switch {
			case err == syscall.EAGAIN:
				return false
			case err != nil && err != syscall.EINTR:
				werr = err
				return true
			case err == nil && n == 0:
				werr = io.ErrUnexpectedEOF
				return true
			}
		}
		return true
	})
	if werr != nil {
		return werr
	}
	return err
}
