package sidecar

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: a sidecar that was started
// stops whole (servers, L2 client and subscription, control-plane
// stream, purge repeats), and so do the test's own servers and clients.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
