package store

import (
	"context"
	"fmt"

	"github.com/tiercache/tiercache/internal/store/l2"
)

// WarmStart fills L1 from the tier's hottest entries in L2 (as sampled by
// Get on every replica), up to maxEntries and maxBytes of encoded entries
// (<= 0: no byte limit), so that a new replica starts with the working set
// of its peers. Entries past all use are passed over, and so are those L1
// refuses as too large. It is bounded by ctx only, and returns how many
// entries it loaded; on an L2 error, those loaded before it as well.
func (s *Layered) WarmStart(ctx context.Context, maxEntries int, maxBytes int64) (int, error) {
	if s.l2 == nil || maxEntries <= 0 {
		return 0, nil
	}
	var hot []l2.KeyEntry
	err := s.call(ctx, 0, opGet, func(ctx context.Context) (err error) {
		hot, err = s.l2.Hottest(ctx, maxEntries, maxBytes)
		return err
	})
	now := s.now()
	n := 0
	// Coldest first: L1 evicts its oldest entries first, so the hottest
	// should be the last written.
	for i := len(hot) - 1; i >= 0; i-- {
		e := &hot[i].Entry
		if !now.Before(usefulUntil(e, s.grace)) {
			continue
		}
		if s.l1.Set(hot[i].Key, e) == nil {
			n++
		}
	}
	if err != nil {
		return n, fmt.Errorf("store: warm start: %w", err)
	}
	return n, nil
}
