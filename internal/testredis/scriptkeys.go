package testredis

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// declaredKeysPrelude shadows `redis` for the script after it: every
// redis.call / redis.pcall whose command takes a key must name one of the
// script's KEYS as its first argument, or the script fails with
// "undeclared key". Redis itself only refuses a key of another hash slot
// (on a cluster); a key of the same slot that the script computes or reads
// from a record slips through, and would break as soon as the layout
// changed. Every command bulkd's scripts use takes its key first.
const declaredKeysPrelude = `
local __r = redis
local __declared = {}
for _, k in ipairs(KEYS) do __declared[k] = true end
local __keyless = {time = true}
local function __check(cmd, k)
  if not __keyless[string.lower(cmd)] and not __declared[k] then
    error('undeclared key ' .. tostring(k) .. ' in ' .. cmd, 2)
  end
end
local redis = setmetatable({
  call = function(cmd, ...) __check(cmd, (...)); return __r.call(cmd, ...) end,
  pcall = function(cmd, ...) __check(cmd, (...)); return __r.pcall(cmd, ...) end,
}, {__index = __r})
`

// CheckScriptKeys makes every script run through rdb (redis.Script.Run,
// outside pipelines) fail when it touches a key it did not declare in KEYS:
// EVALSHA is answered NOSCRIPT without reaching Redis, so Script.Run falls
// back to EVAL, whose source gets the checking prelude. Universal turns it
// on for every test that uses it.
func CheckScriptKeys(rdb redis.UniversalClient) {
	rdb.AddHook(scriptKeysHook{})
}

type scriptKeysHook struct{}

func (scriptKeysHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (scriptKeysHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) >= 2 {
			switch strings.ToLower(fmt.Sprint(args[0])) {
			case "evalsha", "evalsha_ro":
				cmd.SetErr(redis.ErrNoScript)
				return redis.ErrNoScript
			case "eval", "eval_ro":
				if src, ok := args[1].(string); ok && !strings.HasPrefix(src, declaredKeysPrelude) {
					args[1] = declaredKeysPrelude + src
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (scriptKeysHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
