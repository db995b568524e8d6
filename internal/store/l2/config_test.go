package l2

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestValidate(t *testing.T) {
	ok := Config{Addrs: []string{"127.0.0.1:6379"}, Prefix: "tc:ns/tier:"}
	tests := map[string]struct {
		edit func(*Config)
		want []string // field names that must be reported; none: valid
	}{
		"the minimal standalone config is valid":      {func(*Config) {}, nil},
		"a cluster seed list is valid":                {func(c *Config) { c.Mode, c.Addrs = ModeCluster, []string{"a:1", "b:2"} }, nil},
		"a sentinel config is valid":                  {func(c *Config) { c.Mode, c.MasterName = ModeSentinel, "mymaster" }, nil},
		"standalone takes exactly one address":        {func(c *Config) { c.Addrs = []string{"a:1", "b:2"} }, []string{"l2.addresses:"}},
		"no address":                                  {func(c *Config) { c.Addrs = nil }, []string{"l2.addresses:"}},
		"cluster needs an address":                    {func(c *Config) { c.Mode, c.Addrs = ModeCluster, nil }, []string{"l2.addresses:"}},
		"an address without a port":                   {func(c *Config) { c.Addrs = []string{"redis"} }, []string{"l2.addresses[0]:"}},
		"a port out of range":                         {func(c *Config) { c.Addrs = []string{"redis:70000"} }, []string{"l2.addresses[0]:"}},
		"an unknown mode":                             {func(c *Config) { c.Mode = "ring" }, []string{"l2.mode:"}},
		"sentinel without a master name":              {func(c *Config) { c.Mode = ModeSentinel }, []string{"l2.masterName:"}},
		"a master name outside sentinel mode":         {func(c *Config) { c.MasterName = "m" }, []string{"l2.masterName:"}},
		"an empty prefix would share keys":            {func(c *Config) { c.Prefix = "" }, []string{"l2.keyPrefix:"}},
		"a prefix with whitespace":                    {func(c *Config) { c.Prefix = "tc:a b:" }, []string{"l2.keyPrefix:"}},
		"a negative timeout":                          {func(c *Config) { c.Timeout = -time.Second }, []string{"l2.timeout:"}},
		"a negative pool size":                        {func(c *Config) { c.PoolSize = -1 }, []string{"l2.poolSize:"}},
		"every problem is reported, each by its name": {func(c *Config) { c.Mode, c.Prefix, c.Timeout = ModeSentinel, "", -1 }, []string{"l2.masterName:", "l2.keyPrefix:", "l2.timeout:"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := ok
			cfg.Addrs = append([]string(nil), ok.Addrs...)
			tc.edit(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want errors naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to name %s", err, w)
				}
			}
			if _, nerr := New(cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New = %v, want the Validate error", nerr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.Mode != ModeStandalone || c.Timeout != 50*time.Millisecond || c.PoolSize != 10*runtime.GOMAXPROCS(0) {
		t.Fatalf("defaults = %+v", c)
	}
}

// New makes no connection: a client for an address where nothing listens
// is created at once, in every mode, and with TLS.
func TestNewDoesNoIO(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, cfg := range []Config{
		{Addrs: []string{addr}},
		{Addrs: []string{addr}, Mode: ModeCluster},
		{Addrs: []string{addr}, Mode: ModeSentinel, MasterName: "m"},
		{Addrs: []string{addr}, TLS: &tls.Config{MinVersion: tls.VersionTLS12}, Username: "u", Password: "p", PoolSize: 3, Timeout: time.Second},
	} {
		cfg.Prefix = "tc:t/a:"
		start := time.Now()
		c, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("New(%+v) took %s", cfg, d)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// redisError makes a Redis error reply like the ones go-redis returns, whose
// type is internal to go-redis.
func redisError(msg string) error {
	v := reflect.New(reflect.TypeOf(redis.ErrCrossSlot)).Elem()
	v.SetString(msg)
	return v.Interface().(error)
}

func TestIsUnavailable(t *testing.T) {
	tests := map[string]struct {
		err  error
		want bool
	}{
		"no error":                         {nil, false},
		"a miss":                           {ErrNotFound, false},
		"redis.Nil":                        {fmt.Errorf("l2: get: %w", redis.Nil), false},
		"the caller cancelled":             {fmt.Errorf("l2: get: %w", context.Canceled), false},
		"a deadline passed":                {fmt.Errorf("l2: get: %w", context.DeadlineExceeded), true},
		"a socket timeout":                 {&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		"connection refused":               {&net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, true},
		"connection reset":                 {fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		"EOF":                              {io.EOF, true},
		"pool timeout":                     {redis.ErrPoolTimeout, true},
		"closed client":                    {redis.ErrClosed, true},
		"LOADING":                          {redisError("LOADING Redis is loading the dataset in memory"), true},
		"CLUSTERDOWN":                      {redisError("CLUSTERDOWN Hash slot not served"), true},
		"READONLY":                         {redisError("READONLY You can't write against a read only replica."), true},
		"MASTERDOWN":                       {redisError("MASTERDOWN Link with MASTER is down"), true},
		"TRYAGAIN":                         {redisError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		"max clients":                      {redisError("ERR max number of clients reached"), true},
		"WRONGPASS":                        {redisError("WRONGPASS invalid username-password pair or user is disabled."), true},
		"all sentinels down":               {errors.New("redis: all sentinels specified in configuration are unreachable"), true},
		"WRONGTYPE is about one value":     {redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		"a script error is about one call": {redisError("ERR Error running script"), false},
		"anything else":                    {errors.New("l2: set: nil entry"), false},
	}
	for name, tc := range tests {
		if got := IsUnavailable(tc.err); got != tc.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", name, tc.err, got, tc.want)
		}
	}
}
