package redisconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/testredis"
)

func TestParseForms(t *testing.T) {
	for _, tc := range []struct {
		url  string
		kind Kind
		// what the options must say
		addrs  []string
		master string
		user   string
		pass   string
		db     int
		tls    bool
	}{
		{url: "redis://127.0.0.1:6380/2", kind: Single, addrs: []string{"127.0.0.1:6380"}, db: 2},
		{url: "rediss://u:p%40w@redis.example:6390/0?dial_timeout=2s", kind: Single, addrs: []string{"redis.example:6390"}, user: "u", pass: "p@w", tls: true},
		{url: "redis+cluster://a:7000,b:7001,c", kind: Cluster, addrs: []string{"a:7000", "b:7001", "c:6379"}},
		{url: "rediss+cluster://:secret@a:7000,b:7001/0?pool_size=10", kind: Cluster, addrs: []string{"a:7000", "b:7001"}, pass: "secret", tls: true},
		{url: "redis+sentinel://s1,s2:26380/mymaster/3", kind: Sentinel, addrs: []string{"s1:26379", "s2:26380"}, master: "mymaster", db: 3},
		{url: "redis+sentinel://app:pw@s1:26379/mymaster?sentinel_password=sp", kind: Sentinel, addrs: []string{"s1:26379"}, master: "mymaster", user: "app", pass: "pw"},
	} {
		cfg, err := Parse(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if cfg.Kind != tc.kind {
			t.Fatalf("%s: kind %s, want %s", tc.url, cfg.Kind, tc.kind)
		}
		var addrs []string
		var user, pass, master string
		var db int
		var tls bool
		var read time.Duration
		switch cfg.Kind {
		case Single:
			o := cfg.Single
			addrs, user, pass, db, tls, read = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.ReadTimeout
		case Cluster:
			o := cfg.Cluster
			addrs, user, pass, tls, read = o.Addrs, o.Username, o.Password, o.TLSConfig != nil, o.ReadTimeout
		case Sentinel:
			o := cfg.Failover
			addrs, user, pass, db, tls, master, read = o.SentinelAddrs, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.MasterName, o.ReadTimeout
			if strings.Contains(tc.url, "sentinel_password=sp") && o.SentinelPassword != "sp" {
				t.Errorf("%s: sentinel password %q", tc.url, o.SentinelPassword)
			}
		}
		if strings.Join(addrs, " ") != strings.Join(tc.addrs, " ") || user != tc.user || pass != tc.pass || db != tc.db ||
			tls != tc.tls || master != tc.master {
			t.Errorf("%s: addrs %v user %q pass %q db %d tls %v master %q", tc.url, addrs, user, pass, db, tls, master)
		}
		if read != DefaultTimeout {
			t.Errorf("%s: read timeout %v, want the default %v", tc.url, read, DefaultTimeout)
		}
	}
	for _, bad := range []string{
		"127.0.0.1:6379", "http://x", "redis+foo://x", "redis+cluster://a:1/3", "redis+cluster://a:1,,b:2",
		"redis+sentinel://s1:26379", "redis+sentinel://s1/m/0/extra", "redis+sentinel://s1/m?password=x",
		"redis+cluster://a:1?bogus_option=1",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:1/0": "redis://***@h:1/0",
		"redis+sentinel://u:pw@s1,s2/m?sentinel_password=x&a=b": "redis+sentinel://***@s1,s2/m?sentinel_password=***&a=b",
		"redis://h:1/0": "redis://h:1/0",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// Each form reaches a real deployment started here: a server, a
// three-master cluster and a sentinel in front of a master.
func TestOpenRealDeployments(t *testing.T) {
	ctx := context.Background()
	single := testredis.Start(t)
	cluster := testredis.StartCluster(t)
	master := testredis.Start(t)
	sentinel := testredis.StartSentinel(t, master, "bulkdmaster")
	for _, u := range []string{single.URL, cluster.URL, sentinel.URL} {
		rdb, err := Open(ctx, u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		for i := 0; i < 20; i++ { // keys in many slots
			k := "k" + string(rune('a'+i))
			if err := rdb.Set(ctx, k, u, 0).Err(); err != nil {
				t.Fatalf("%s: %v", u, err)
			}
		}
		if got, err := rdb.Get(ctx, "kc").Result(); err != nil || got != u {
			t.Fatalf("%s: get %q %v", u, got, err)
		}
		_ = rdb.Close()
	}
	// The sentinel's client wrote to the master it names.
	m, err := Open(ctx, master.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, _ := m.Get(ctx, "ka").Result(); got != sentinel.URL {
		t.Fatalf("master has %q", got)
	}
	// A dead address fails within the timeout, with the password hidden.
	_, err = Open(ctx, "redis://:topsecret@127.0.0.1:1/0?dial_timeout=200ms")
	if err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("dead server: %v", err)
	}
}

// ConnLost tells a connection that broke under a command (wrapped, as the
// callers see it) from Redis answering, nothing, and a closed client.
func TestConnLost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("charge: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{syscall.EPIPE, true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{redis.ErrPoolTimeout, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}, true},
		{nil, false},
		{redis.Nil, false},
		{redis.ErrClosed, false},
		{fmt.Errorf("x: %w", redis.ErrClosed), false},
		{errors.New("ERR wrong number of arguments"), false},
	} {
		if got := ConnLost(tc.err); got != tc.want {
			t.Errorf("ConnLost(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// CannotServe: what a restarting Redis really answers (LOADING while it
// reads its append-only file is the common one) counts; an ordinary error
// reply does not.
func TestCannotServe(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testredis.Start(t).Addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil || CannotServe(err) {
		t.Errorf("unknown command: %v counted as cannot serve", err)
	}
	// A Lua script can return any error reply: the ones Redis gives while
	// it cannot serve.
	for _, reply := range []string{"LOADING Redis is loading the dataset in memory", "READONLY You can't write against a read only replica.",
		"MASTERDOWN Link with MASTER is down", "CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request during rehashing of slot"} {
		err := rdb.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, reply).Err()
		if !CannotServe(fmt.Errorf("wrapped: %w", err)) {
			t.Errorf("%q: %v not counted as cannot serve", reply, err)
		}
	}
}
