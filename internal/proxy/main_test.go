package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: fills, refreshes, relays and the
// servers and clients of the test end before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
