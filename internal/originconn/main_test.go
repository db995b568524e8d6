package originconn

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: the test's origins and the
// connections dialed to them end with the test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
