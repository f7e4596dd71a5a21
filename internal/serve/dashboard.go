package serve

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/dashboard/users"
)

// newDashboard builds the account dashboard the API mounts under
// /dashboard (apiserver.Deps.Dashboard calls it with the API being built):
// it submits through api and reads the stores api reads, on api's clock.
func newDashboard(cfg config.Config, api *apiserver.Server, log *slog.Logger) *dashboard.Dashboard {
	proxies, _ := cfg.TrustedProxyPrefixes() // checked by cfg.Validate
	return dashboard.New(dashboard.Deps{
		API:            api,
		Accounts:       api.Accounts,
		Jobs:           api.Jobs,
		Billing:        api.Billing,
		Redis:          api.Redis,
		Limits:         api.Limits,
		Users:          users.New(api.Redis, api.Now, users.Options{}),
		AllowHTTP:      cfg.DashboardAllowHTTP,
		Origin:         cfg.DashboardOrigin,
		TrustedProxies: proxies,
		IPv6Prefix:     cfg.SignInIPv6Prefix,
		Logger:         log,
		Now:            api.Now,
	})
}

// demoDashboard gives the demo account (make run) a dashboard user and
// prints the dashboard's address and a one-time sign-in link.
func demoDashboard(ctx context.Context, c *Components, cfg config.Config, addr string, stdout io.Writer, log *slog.Logger) {
	d := c.Dashboard
	if d == nil {
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
