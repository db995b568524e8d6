package controlplane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// saveLastGood writes c's JSON to path atomically: a reader (this sidecar
// restarted) sees the old file or the new one, never a torn one. The file
// holds secrets (Redis password, purge token), so it is private.
func saveLastGood(path string, c tierconfig.Config) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("save last good config: %w", err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("save last good config: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("save last good config: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("save last good config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save last good config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save last good config: %w", err)
	}
	ok = true
	return nil
}
