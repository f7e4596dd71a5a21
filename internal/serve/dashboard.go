package serve

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/dashboard/users"
)

// newDashboard builds the account dashboard the API mounts under
// /dashboard; its API field is set once the API is built.
func newDashboard(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, now func() time.Time) *dashboard.Dashboard {
	proxies, _ := cfg.TrustedProxyPrefixes() // checked by cfg.Validate
	return dashboard.New(dashboard.Deps{
		Users:          users.New(rdb, now, users.Options{}),
		AllowHTTP:      cfg.DashboardAllowHTTP,
		Origin:         cfg.DashboardOrigin,
		TrustedProxies: proxies,
		Logger:         log,
		Now:            now,
	})
}

// demoDashboard gives the demo account (make run) a dashboard user and
// prints the dashboard's address and a one-time sign-in link.
func demoDashboard(ctx context.Context, c *Components, cfg config.Config, addr string, stdout io.Writer, log *slog.Logger) {
	d, ok := c.API.Dashboard.(*dashboard.Dashboard)
	if !ok {
		return
	}
	b, err := os.ReadFile(cfg.DemoKeysFile)
	if err != nil {
		log.Warn("demo dashboard user: no demo keys file", "err", err)
		return
	}
	acct := parseEnvFile(string(b))["BULKD_ACCOUNT"]
	if acct == "" {
		return
	}
	if err := dashboard.Demo(ctx, d.Users, acct, "http://"+addr, stdout); err != nil {
		log.Warn("demo dashboard user", "err", err)
	}
}
