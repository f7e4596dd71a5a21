package serve

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// redisLogger sends go-redis's own messages (a pool that cannot dial
// while Redis restarts, say) to the process log, so they are JSON lines
// like every other line instead of a stray "redis: <date> pool.go:..." on
// stderr.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}
