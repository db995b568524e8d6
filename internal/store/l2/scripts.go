package l2

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Scripts that keep a read and a write of one key together. Each names
// exactly one key, so it runs on that key's node in cluster mode, and calls
// only commands the tier's ACL user has (docs/l2.md).

// delScript deletes an entry and returns its value when it may be a
// file-backed entry (its bytes hold the version 2 entry magic "TCE\2"), so
// that the caller deletes that body's chunks too; else 1 (deleted) or 0
// (missing). Inline entries, whose bodies may be large, never travel back.
//
// KEYS[1] entry key name.
var delScript = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if not v then return 0 end
redis.call("DEL", KEYS[1])
if string.find(v, "TCE\2", 1, true) then return v end
return 1
`)

// swapScript writes a file-backed entry and returns the value it replaced
// when that may be a file-backed entry too (see delScript), so that the
// caller deletes the replaced body's chunks; else 0.
//
// KEYS[1] entry key name, ARGV[1] value, ARGV[2] TTL in ms.
var swapScript = redis.NewScript(`
local old = redis.call("GET", KEYS[1])
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
if old and old ~= ARGV[1] and string.find(old, "TCE\2", 1, true) then return old end
return 0
`)

// scriptCall is one script call queued in a pipeline, kept so that it can
// be sent again with EVAL.
type scriptCall struct {
	s    *redis.Script
	keys []string
	args []any
	cmd  *redis.Cmd
}

// queue adds the call to p as EVALSHA.
func (sc *scriptCall) queue(ctx context.Context, p redis.Pipeliner) {
	sc.cmd = sc.s.EvalSha(ctx, p, sc.keys, sc.args...)
}

// redoNoScript completes a pipeline that queued calls: err is the
// pipeline's, cmds its commands. A server forgets its scripts when it
// restarts: EVALSHA answers NOSCRIPT, and EVAL, which sends the source,
// caches it again. The calls that got NOSCRIPT are sent again with EVAL
// (their cmd replaced) when no other command failed; otherwise the first
// error is returned.
func redoNoScript(ctx context.Context, r redis.Cmdable, cmds []redis.Cmder, calls []*scriptCall, err error) error {
	if err == nil {
		return nil
	}
	var redo []*scriptCall
	for _, sc := range calls {
		if redis.HasErrorPrefix(sc.cmd.Err(), "NOSCRIPT") {
			redo = append(redo, sc)
		}
	}
	if len(redo) == 0 {
		return err
	}
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && !redis.HasErrorPrefix(e, "NOSCRIPT") {
			return e
		}
	}
	_, err = r.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sc := range redo {
			sc.cmd = sc.s.Eval(ctx, p, sc.keys, sc.args...)
		}
		return nil
	})
	return err
}
