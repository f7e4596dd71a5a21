// Package redisconn opens the Redis every bulkd process shares, from one
// URL (--redis-url, BULKD_REDIS_URL): a single server, a Redis Cluster, or
// a master found through Redis Sentinel. Every component takes the result
// as a redis.UniversalClient, so none of them knows which it got.
//
// URL forms (TLS: the same with "rediss"):
//
//	redis://[[user]:password@]host[:port][/db][?option=value&...]
//	    one server (go-redis's ParseURL; db defaults to 0, port to 6379)
//	redis+cluster://[[user]:password@]host:port[,host:port...][?option=value&...]
//	    a Redis Cluster: any reachable nodes seed the client, which learns
//	    the rest; database 0 only (a cluster has no others)
//	redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db][?option=value&...]
//	    the master named master, as the listed sentinels report it
//	    (port 26379 when omitted); user and password are the master's;
//	    sentinel_username and sentinel_password options authenticate to
//	    the sentinels when they need it
//
// Options are go-redis's own, in snake case (dial_timeout=3s, pool_size=64,
// max_retries=5, read_timeout=2s, ...). Dial, read and write timeouts
// default to 5 s, so no call waits on a dead server forever.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is the deployment a URL names.
type Kind string

// Kinds.
const (
	Single   Kind = "single"
	Cluster  Kind = "cluster"
	Sentinel Kind = "sentinel"
)

// Config is a parsed URL: exactly one of the option sets is set, by Kind.
type Config struct {
	Kind     Kind
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
}

// Defaults applied when the URL does not set them.
const (
	DefaultTimeout  = 5 * time.Second
	DefaultPoolSize = 128 // per node for a cluster
)

// Parse reads a Redis URL in one of the package's forms.
func Parse(raw string) (*Config, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, fmt.Errorf("redis url %s: no scheme (want redis://, rediss://, redis+cluster:// or redis+sentinel://)", Redact(raw))
	}
	base, variant, _ := strings.Cut(strings.ToLower(scheme), "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("redis url %s: unknown scheme %q", Redact(raw), scheme)
	}
	var cfg *Config
	var err error
	switch variant {
	case "":
		var o *redis.Options
		if o, err = redis.ParseURL(raw); err == nil {
			cfg = &Config{Kind: Single, Single: o}
		}
	case "cluster":
		cfg, err = parseCluster(base, rest)
	case "sentinel":
		cfg, err = parseSentinel(base, rest)
	default:
		return nil, fmt.Errorf("redis url %s: unknown scheme %q", Redact(raw), scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("redis url %s: %w", Redact(raw), err)
	}
	cfg.applyDefaults()
	return cfg, nil
}

// authority splits rest (what follows "scheme://") into user info, hosts,
// path and query. Hosts are comma-separated, each host[:port].
func authority(rest, defaultPort string) (userinfo string, hosts []string, path, query string, err error) {
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		end = i
	}
	auth, tail := rest[:end], rest[end:]
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		userinfo, auth = auth[:at], auth[at+1:]
	}
	path, query, _ = strings.Cut(tail, "?")
	for _, h := range strings.Split(auth, ",") {
		if h == "" {
			return "", nil, "", "", errors.New("empty host in the host list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || port == "" {
			return "", nil, "", "", fmt.Errorf("bad host %q", h)
		}
		hosts = append(hosts, h)
	}
	return userinfo, hosts, path, query, nil
}

// parseCluster rewrites redis+cluster://a,b,c?o into go-redis's cluster URL
// (redis://a?o&addr=b&addr=c).
func parseCluster(base, rest string) (*Config, error) {
	userinfo, hosts, path, query, err := authority(rest, "6379")
	if err != nil {
		return nil, err
	}
	if p := strings.Trim(path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("a cluster has only database 0, not %q", p)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := base + "://"
	if userinfo != "" {
		u += userinfo + "@"
	}
	u += hosts[0]
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	o, err := redis.ParseClusterURL(u)
	if err != nil {
		return nil, err
	}
	return &Config{Kind: Cluster, Cluster: o}, nil
}

// parseSentinel rewrites redis+sentinel://[u:p@]s1,s2/master/db?o into
// go-redis's failover URL, where the user info authenticates to the
// sentinels and the master's credentials are options.
func parseSentinel(base, rest string) (*Config, error) {
	userinfo, hosts, path, query, err := authority(rest, "26379")
	if err != nil {
		return nil, err
	}
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || len(parts) > 2 {
		return nil, errors.New("want /master-name[/db] after the sentinels")
	}
	master, err := url.PathUnescape(parts[0])
	if err != nil || master == "" {
		return nil, fmt.Errorf("bad master name %q", parts[0])
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	for _, k := range []string{"master_name", "username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("option %s: give it in the URL (master in the path, the master's user and password before @)", k)
		}
	}
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", master)
	if userinfo != "" {
		ui, err := url.Parse("redis://" + userinfo + "@h")
		if err != nil {
			return nil, fmt.Errorf("user info: %w", err)
		}
		if user := ui.User.Username(); user != "" {
			q.Set("username", user)
		}
		if pw, ok := ui.User.Password(); ok {
			q.Set("password", pw)
		}
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := base + "://"
	if sentUser != "" || sentPass != "" {
		u += url.UserPassword(sentUser, sentPass).String() + "@"
	}
	u += hosts[0]
	if len(parts) == 2 {
		u += "/" + parts[1]
	}
	u += "?" + q.Encode()
	o, err := redis.ParseFailoverURL(u)
	if err != nil {
		return nil, err
	}
	return &Config{Kind: Sentinel, Failover: o}, nil
}

func (c *Config) applyDefaults() {
	def := func(d *time.Duration) {
		if *d == 0 {
			*d = DefaultTimeout
		}
	}
	switch c.Kind {
	case Single:
		def(&c.Single.DialTimeout)
		def(&c.Single.ReadTimeout)
		def(&c.Single.WriteTimeout)
		if c.Single.PoolSize == 0 {
			c.Single.PoolSize = DefaultPoolSize
		}
	case Cluster:
		def(&c.Cluster.DialTimeout)
		def(&c.Cluster.ReadTimeout)
		def(&c.Cluster.WriteTimeout)
		if c.Cluster.PoolSize == 0 {
			c.Cluster.PoolSize = DefaultPoolSize
		}
	case Sentinel:
		def(&c.Failover.DialTimeout)
		def(&c.Failover.ReadTimeout)
		def(&c.Failover.WriteTimeout)
		if c.Failover.PoolSize == 0 {
			c.Failover.PoolSize = DefaultPoolSize
		}
	}
}

// NewClient returns the client for c; nothing is dialled yet.
func (c *Config) NewClient() redis.UniversalClient {
	switch c.Kind {
	case Cluster:
		return redis.NewClusterClient(c.Cluster)
	case Sentinel:
		return redis.NewFailoverClient(c.Failover)
	default:
		return redis.NewClient(c.Single)
	}
}

// Open parses url, connects and checks that Redis answers (within 5 s).
func Open(ctx context.Context, raw string) (redis.UniversalClient, error) {
	cfg, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	rdb := cfg.NewClient()
	pctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis (%s) at %s does not answer: %w", cfg.Kind, Redact(raw), err)
	}
	return rdb, nil
}

// Redact hides the passwords of a Redis URL (user info and the
// sentinel_password option) before it is logged or shown.
func Redact(raw string) string {
	out := raw
	if scheme := strings.Index(out, "://"); scheme >= 0 {
		rest := out[scheme+3:]
		end := len(rest)
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			end = i
		}
		if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
			out = out[:scheme+3] + "***" + rest[at:]
		}
	}
	if i := strings.Index(out, "sentinel_password="); i >= 0 {
		j := i + len("sentinel_password=")
		k := strings.IndexAny(out[j:], "&#")
		if k < 0 {
			k = len(out) - j
		}
		out = out[:j] + "***" + out[j+k:]
	}
	return out
}

// CannotServe reports whether err is Redis itself saying it cannot serve
// right now (loading its data, a replica during failover, a master or
// cluster without a quorum, a slot moving): the same command works once it
// can.
func CannotServe(err error) bool {
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err)
}

// ConnLost reports whether err is the connection to Redis failing under
// the command (Redis restarted or went away: reset, EOF, refused, broken
// pipe, a network timeout, a pool with no connection to give), as opposed
// to Redis answering with an error. A closed client is not: that is this
// process's own doing.
func ConnLost(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, redis.ErrPoolTimeout)
}
