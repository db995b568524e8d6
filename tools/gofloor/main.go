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
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
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
	fmt.Fprintf(stderr, "gofloor: serving %d-byte hits on %s\n", *size, ln.Addr())
	return serve(ctx, ln, int(f.Fd()), int64(*size))
}

// serve answers every request on every connection of ln with the body of
// size bytes in file fd, until ctx ends.
func serve(ctx context.Context, ln net.Listener, fd int, size int64) error {
	hdr := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" +
		"Content-Length: " + strconv.FormatInt(size, 10) + "\r\nCache-Control: max-age=3600\r\n" +
		"Age: 0\r\nVia: 1.1 gofloor\r\nX-Cache: HIT; layer=l1\r\n\r\n")
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
