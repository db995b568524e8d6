package tierconfig

import (
	"sync"
	"testing"
	"time"
)

func TestHolderConcurrentLoadAndStore(t *testing.T) {
	configs := make([]*Compiled, 4)
	for i := range configs {
		c := Default()
		c.Origin.Timeout = Duration(time.Duration(i+1) * time.Second)
		cc, err := Compile(c)
		if err != nil {
			t.Fatal(err)
		}
		configs[i] = cc
	}
	h := NewHolder(configs[0])
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				h.Store(configs[(w+i)%len(configs)])
			}
		})
		wg.Go(func() {
			for range 1000 {
				c := h.Load()
				// Read through the pointer so the race detector sees it.
				if c == nil || c.Match("", "/x", nil) != c.Default || c.Config.Origin.Timeout <= 0 {
					t.Error("Load returned a config that is not one of those stored")
					return
				}
			}
		})
	}
	wg.Wait()
	got := h.Load()
	found := false
	for _, c := range configs {
		found = found || c == got
	}
	if !found {
		t.Fatal("the final config is not one of those stored")
	}
}
