package l2

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Modes of Config.Mode.
const (
	ModeStandalone = "standalone"
	ModeSentinel   = "sentinel"
	ModeCluster    = "cluster"
)

// Defaults applied by New to zero fields.
const (
	DefaultTimeout = 50 * time.Millisecond
	// DefaultPoolSizePerCPU times GOMAXPROCS is the default PoolSize.
	DefaultPoolSizePerCPU = 10
)

// Config says where L2 is and how to talk to it.
type Config struct {
	// Addrs: the server (standalone, exactly one), the sentinels
	// (sentinel) or seed nodes (cluster), as host:port.
	Addrs []string
	// Mode is ModeStandalone, ModeSentinel or ModeCluster ("" means
	// standalone).
	Mode string
	// MasterName is the sentinel master name; sentinel mode only.
	MasterName string
	// Username and Password authenticate to the data servers (not to the
	// sentinels). An empty Username with a Password is the default user.
	Username, Password string
	// TLS enables TLS with this configuration; nil is plaintext.
	TLS *tls.Config
	// Prefix starts every Redis key of this tier, e.g. "tc:shop/catalog:".
	// Tiers never read each other's keys, so it must not be empty.
	Prefix string
	// Timeout bounds dialing, each socket read and write, waiting for a
	// pooled connection, and a single-key call as a whole (see Client).
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// PoolSize is the connection pool size per server; 0 means
	// DefaultPoolSizePerCPU × GOMAXPROCS.
	PoolSize int
}

// Validate reports every problem with c, each naming its field.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("l2.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch c.Mode {
	case "", ModeStandalone:
		if len(c.Addrs) != 1 {
			add("addresses", "standalone mode takes exactly one address (got %d)", len(c.Addrs))
		}
	case ModeSentinel, ModeCluster:
		if len(c.Addrs) == 0 {
			add("addresses", "%s mode needs at least one address", c.Mode)
		}
	default:
		add("mode", "must be one of %s, %s, %s (got %q)", ModeStandalone, ModeSentinel, ModeCluster, c.Mode)
	}
	for i, a := range c.Addrs {
		if !validHostPort(a) {
			add(fmt.Sprintf("addresses[%d]", i), "must be host:port with a non-empty host and a numeric port in 1-65535 (got %q)", a)
		}
	}
	switch {
	case c.Mode == ModeSentinel && c.MasterName == "":
		add("masterName", "required when l2.mode is %s", ModeSentinel)
	case c.Mode != ModeSentinel && c.MasterName != "":
		add("masterName", "allowed only when l2.mode is %s (got %q)", ModeSentinel, c.MasterName)
	}
	switch {
	case c.Prefix == "":
		add("keyPrefix", "must not be empty (tiers would share keys)")
	case strings.IndexFunc(c.Prefix, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		add("keyPrefix", "must not contain whitespace or control characters (got %q)", c.Prefix)
	}
	if c.Timeout < 0 {
		add("timeout", "must be >= 0, 0 meaning %s (got %s)", DefaultTimeout, c.Timeout)
	}
	if c.PoolSize < 0 {
		add("poolSize", "must be >= 0, 0 meaning %d per CPU (got %d)", DefaultPoolSizePerCPU, c.PoolSize)
	}
	return errors.Join(errs...)
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeStandalone
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSizePerCPU * runtime.GOMAXPROCS(0)
	}
	return c
}

func validHostPort(a string) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
