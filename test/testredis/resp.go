package testredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// The helpers talk to the processes they start with this minimal RESP2
// client rather than go-redis, so that readiness checks and cluster set-up
// leave no pools or background goroutines behind in the tests that use
// them.

// respError is an error reply from the server.
type respError string

func (e respError) Error() string { return string(e) }

// defaultCommandTimeout bounds one command when ctx has no deadline.
const defaultCommandTimeout = 5 * time.Second

// do runs one command on a new connection to addr, authenticating first
// when password is set, and returns the reply: string, int64, nil or []any;
// an error reply is a respError.
func do(ctx context.Context, addr, password string, args ...string) (any, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultCommandTimeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	rd := bufio.NewReader(conn)
	if password != "" {
		if _, err := roundTrip(conn, rd, "AUTH", password); err != nil {
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return roundTrip(conn, rd, args...)
}

func roundTrip(w io.Writer, rd *bufio.Reader, args ...string) (any, error) {
	buf := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		buf = fmt.Appendf(buf, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := w.Write(buf); err != nil {
		return nil, err
	}
	v, err := readReply(rd)
	if err != nil {
		return nil, err
	}
	if e, ok := v.(respError); ok {
		return nil, e
	}
	return v, nil
}

func readReply(rd *bufio.Reader) (any, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("malformed bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("malformed array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			// Error replies inside an array (EXEC) stay values here.
			if out[i], err = readReply(rd); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errors.New("unknown reply type " + strconv.Quote(line[:1]))
}
