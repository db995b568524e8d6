package httpcache

import "strconv"

// Only test failures print a Use: its String lives here, out of the
// product (make lint's dead-code check).

// String names the Use in test failures.
func (u Use) String() string {
	switch u {
	case UseFresh:
		return "UseFresh"
	case UseStaleRevalidate:
		return "UseStaleRevalidate"
	case UseStale:
		return "UseStale"
	case UseValidate:
		return "UseValidate"
	}
	return "Use(" + strconv.Itoa(int(u)) + ")"
}
