package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// LastGoodFile is the name of the last good config in --state-dir.
const LastGoodFile = "config.json"

// startupConfig picks the config the sidecar starts with, in DESIGN.md's
// order: the last good config in --state-dir (written after every applied
// control-plane push; it survives container restarts on the pod's
// emptyDir), then the config given on the command line (--config file or
// --initial-config text, which the operator places in the pod spec), then
// the built-in defaults. A last good file that cannot be read, is not
// valid or names another tier's key prefix is skipped with a warning,
// never fatal: the next source serves. An explicit --config or
// --initial-config that is not valid is an error (RunWith checks their
// key prefix).
func startupConfig(o Options, log *slog.Logger) (tierconfig.Config, string, error) {
	if path := lastGoodPath(o); path != "" {
		c, err := tierconfig.Load(path)
		if err == nil {
			err = checkKeyPrefix(c.L2, o)
		}
		switch {
		case err == nil:
			return c, path, nil
		case errors.Is(err, fs.ErrNotExist):
		default:
			log.Warn("last good config skipped", "path", path, "err", err)
		}
	}
	switch {
	case o.ConfigFile != "":
		c, err := tierconfig.Load(o.ConfigFile)
		return c, o.ConfigFile, err
	case o.InitialConfig != "":
		c, err := tierconfig.Parse([]byte(o.InitialConfig))
		if err != nil {
			return c, "", fmt.Errorf("--initial-config: %w", err)
		}
		return c, "--initial-config", nil
	}
	return tierconfig.Default(), "built-in defaults", nil
}
