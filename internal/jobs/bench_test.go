package jobs

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/testredis"
)

// BenchmarkStoreCreate100k writes a 100,000-row job (100,000 distinct
// company URLs, the largest submission SPEC allows) and measures how long
// Redis is blocked at a time while it is written, two ways:
//
//   - max-cmd-us: the longest single command in SLOWLOG (logged with
//     slowlog-log-slower-than 0, so every command is there; a MULTI/EXEC
//     counts as its EXEC, which runs the whole transaction at once);
//   - max-ping-us: the slowest PING of another client sending one every
//     200 µs during the write: what any other request waits at worst.
//
// Run: go test ./internal/jobs -run '^$' -bench StoreCreate100k -benchtime 5x
func BenchmarkStoreCreate100k(b *testing.B) {
	srv := testredis.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8})
	defer rdb.Close()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	defer probe.Close()
	ctx := context.Background()
	st := NewStore(rdb, billing.New(rdb, nil))

	const n = 100_000
	bld := NewBuilder(testFamily, n)
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("https://www.linkedin.com/company/company-number-%06d", i)
		bld.AddValid(u, u, u)
	}
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		b.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "slowlog-max-len", "100000").Err(); err != nil {
		b.Fatal(err)
	}

	var maxCmd, maxPing time.Duration
	var maxName string
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := time.Now()
		j := &Job{ID: uuid.NewString(), Family: testFamily, AccountID: "acct_bench", KeyID: "k", Status: StatusRunning,
			TotalRows: n, Distinct: n, ShardSize: 1000, Shards: n / 1000, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := rdb.SlowLogReset(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var pings []time.Duration
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if err := probe.Ping(ctx).Err(); err != nil {
					return
				}
				pings = append(pings, time.Since(t0))
				time.Sleep(200 * time.Microsecond)
			}
		}()
		t0 := time.Now()
		if err := st.create(ctx, j, bld); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		close(stop)
		wg.Wait()
		b.StopTimer()
		logs, err := rdb.Do(ctx, "SLOWLOG", "GET", "100000").Slice()
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range logs {
			f := e.([]any)
			d := time.Duration(f[2].(int64)) * time.Microsecond
			var args []string
			for _, a := range f[3].([]any) {
				s := fmt.Sprint(a)
				if len(s) > 24 {
					s = s[:24] + "…"
				}
				args = append(args, s)
			}
			cmd := strings.ToUpper(args[0])
			if cmd == "SLOWLOG" || cmd == "CONFIG" || cmd == "PING" {
				continue
			}
			if d > maxCmd {
				maxCmd, maxName = d, strings.Join(args[:min(len(args), 3)], " ")
			}
		}
		sort.Slice(pings, func(a, c int) bool { return pings[a] < pings[c] })
		if len(pings) > 0 && pings[len(pings)-1] > maxPing {
			maxPing = pings[len(pings)-1]
		}
		if err := st.Delete(ctx, j.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(maxCmd.Microseconds()), "max-cmd-us")
	b.ReportMetric(float64(maxPing.Microseconds()), "max-ping-us")
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "write-ms/op")
	b.Logf("longest command: %s (%v); slowest concurrent PING %v", maxName, maxCmd, maxPing)
}
