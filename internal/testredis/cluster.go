package testredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster of three masters (no replicas) on
// loopback: three `redis-server --cluster-enabled yes` joined by
// `redis-cli --cluster create`. The engine's tests run against one to prove
// that every script and transaction stays within one hash slot.
type Cluster struct {
	Nodes []*Server
	Addrs []string
	// URL is the cluster in bulkd's --redis-url syntax
	// (redis+cluster://host:port,host:port,host:port).
	URL string
}

// StartCluster starts a cluster for tb and stops it when tb ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := startClusterProcess(tb.TempDir())
	if err != nil {
		tb.Fatalf("testredis: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// startClusterProcess starts a three-master cluster whose files live under
// dir, outside of a test; the caller must call Stop.
func startClusterProcess(dir string) (*Cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found in PATH (install Debian package redis-server, or run `make deps`): %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found in PATH (Debian package redis-tools, a dependency of redis-server): %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startCluster(bin, cli, dir)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startCluster(bin, cli, dir string) (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		s, err := startClusterNode(bin, dir)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	c.URL = "redis+cluster://" + strings.Join(c.Addrs, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, lastLines(string(out), 5))
	}
	if err := c.waitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startClusterNode starts one cluster-enabled node on a free port; its
// cluster bus port is chosen free too (not port+10000, which may be taken).
func startClusterNode(bin, dir string) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		bus, err := FreePort()
		if err != nil {
			return nil, err
		}
		if bus == port {
			continue
		}
		s, err := launch(bin, dir, port, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-port", fmt.Sprint(bus),
			"--cluster-node-timeout", "5000",
		})
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// waitReady waits until every node says cluster_state:ok and serves all
// 16,384 slots, so the first command of a test is not bounced around.
func (c *Cluster) waitReady(ctx context.Context) error {
	for _, addr := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := func() error {
			defer n.Close()
			for {
				info, err := n.ClusterInfo(ctx).Result()
				if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") &&
					strings.Contains(info, "cluster_known_nodes:3") {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("cluster node %s not ready: %v %s", addr, err, info)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		if err != nil {
			return err
		}
	}
	// Every node must also have a view of the slots that covers them all
	// (the gossip that spreads it follows cluster_state:ok by a little).
	for _, addr := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		for {
			slots, err := n.ClusterSlots(ctx).Result()
			covered := 0
			for _, s := range slots {
				covered += s.End - s.Start + 1
			}
			if err == nil && covered == 16384 && len(slots) >= 3 {
				break
			}
			select {
			case <-ctx.Done():
				n.Close()
				return fmt.Errorf("cluster node %s: slots not covered (%d): %v", addr, covered, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		n.Close()
	}
	return nil
}

// Client returns a cluster client for tb, closed when tb ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cl := c.NewClient()
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NewClient returns a cluster client; the caller closes it.
func (c *Cluster) NewClient() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: 64})
}

// FlushAll empties every master.
func (c *Cluster) FlushAll(ctx context.Context) error {
	var errs []error
	for _, addr := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		if err := n.FlushAll(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("flush %s: %w", addr, err))
		}
		_ = n.Close()
	}
	return errors.Join(errs...)
}

// Stop kills every node; safe to call more than once.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// EnvMode names the environment variable that picks the Redis the
// packages' tests run against through Universal: unset (or "single") for a
// private redis-server per test, "cluster" for one shared three-master
// cluster per test binary, emptied before each test. `make test` runs the
// engine's packages once each way.
const EnvMode = "BULKD_TEST_REDIS"

// ClusterMode reports whether tests run against a Redis Cluster.
func ClusterMode() bool { return os.Getenv(EnvMode) == "cluster" }

var shared struct {
	sync.Mutex
	main    bool // Main is in charge of stopping the cluster
	cluster *Cluster
	dir     string
}

// Main runs a package's tests and stops the shared cluster afterwards. A
// package whose tests use Universal calls it from TestMain:
//
//	func TestMain(m *testing.M) { testredis.Main(m) }
func Main(m *testing.M) {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	if shared.cluster != nil {
		shared.cluster.Stop()
		shared.cluster = nil
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	shared.Unlock()
	os.Exit(code)
}

// sharedCluster returns the test binary's cluster, starting it on first use
// (Main stops it). It does not empty it.
func sharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.main {
		tb.Fatalf("testredis: a shared cluster needs testredis.Main in the package's TestMain (or it would outlive the tests)")
	}
	if shared.cluster == nil {
		dir, err := os.MkdirTemp("", "bulkd-testcluster-")
		if err != nil {
			tb.Fatalf("testredis: %v", err)
		}
		c, err := startClusterProcess(dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			tb.Fatalf("testredis: %v", err)
		}
		shared.cluster, shared.dir = c, dir
	}
	return shared.cluster
}

// Universal returns an empty Redis for tb behind the client type every
// bulkd component takes: a private redis-server (as Client does), or, with
// BULKD_TEST_REDIS=cluster, a client of the shared cluster after emptying
// it. Either way every script run through it must declare the keys it
// touches (CheckScriptKeys). Tests that use it must not run in parallel
// with each other.
func Universal(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	var rdb redis.UniversalClient
	if !ClusterMode() {
		rdb, _ = Client(tb)
	} else {
		c := sharedCluster(tb)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.FlushAll(ctx); err != nil {
			tb.Fatalf("testredis: %v", err)
		}
		rdb = c.Client(tb)
	}
	CheckScriptKeys(rdb)
	return rdb
}
