package bodystore

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: no reader of a body still
// being written stays blocked once its writer ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
