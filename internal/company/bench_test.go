package company

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/redis/go-redis/v9"
)

const benchRecords = 100_000

var benchData = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	if err := Generate(&b, benchRecords, 1, "network.example"); err != nil {
		panic(err)
	}
	return b.Bytes()
})

func benchClient(b *testing.B) *redis.Client {
	b.Helper()
	rdb, _ := testredis.Client(b)
	return rdb
}

func BenchmarkGenerate(b *testing.B) {
	for b.Loop() {
		if err := Generate(io.Discard, benchRecords, 1, "network.example"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchRecords*b.N)/b.Elapsed().Seconds(), "companies/s")
}

// BenchmarkImport imports 100,000 generated JSONL records into an empty
// private redis-server per iteration.
func BenchmarkImport(b *testing.B) {
	ctx := context.Background()
	data := benchData()
	rdb := benchClient(b)
	st := NewStore(rdb, "bulkd:")
	b.SetBytes(int64(len(data)))
	cpu := startCPU(b, rdb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		s, err := Import(ctx, bytes.NewReader(data), FormatJSONL, st, stubNorm, nil)
		if err != nil || s.Imported != benchRecords {
			b.Fatalf("import: %v, %+v", err, s)
		}
	}
	b.ReportMetric(float64(benchRecords*b.N)/b.Elapsed().Seconds(), "companies/s")
	cpu.report(float64(benchRecords*b.N), "company")
}

// loadedStore returns a store holding the benchmark data set and the
// canonical URLs and domains of its records.
func loadedStore(b *testing.B) (st *Store, urls, domains []string) {
	b.Helper()
	ctx := context.Background()
	st = NewStore(benchClient(b), "bulkd:")
	if _, err := Import(ctx, bytes.NewReader(benchData()), FormatJSONL, st, stubNorm, nil); err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(benchData()), "\n") {
		if u := jsonField(line, `"network_url":"`); u != "" {
			urls = append(urls, u)
		}
		if d := jsonField(line, `"domain":"`); d != "" {
			domains = append(domains, d)
		}
	}
	return st, urls, domains
}

// jsonField extracts a string value without JSON decoding; enough for the
// generator's output, whose URLs and domains need no escaping.
func jsonField(line, prefix string) string {
	_, rest, ok := strings.Cut(line, prefix)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// cpuMeter measures CPU time rather than wall time: the machine is shared
// and often busy, so wall-clock rates understate what an idle server does.
// It reads the redis-server process's CPU from INFO cpu and this process's
// from getrusage.
type cpuMeter struct {
	b             *testing.B
	rdb           redis.UniversalClient
	redis0, self0 float64
}

func startCPU(b *testing.B, rdb redis.UniversalClient) *cpuMeter {
	m := &cpuMeter{b: b, rdb: rdb}
	m.redis0, m.self0 = m.redisCPU(), selfCPU()
	return m
}

func (m *cpuMeter) redisCPU() float64 {
	info, err := m.rdb.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		m.b.Fatal(err)
	}
	var total float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(info["CPU"][k], 64)
		if err != nil {
			m.b.Fatal(err)
		}
		total += v
	}
	return total
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// report adds redis-cpu-µs and client-cpu-µs per unit (per op or per record).
func (m *cpuMeter) report(units float64, unit string) {
	m.b.ReportMetric((m.redisCPU()-m.redis0)*1e6/units, "redis-cpu-µs/"+unit)
	m.b.ReportMetric((selfCPU()-m.self0)*1e6/units, "client-cpu-µs/"+unit)
}

// benchLookup measures 500-input batches where 1 input in 10 is unknown,
// like a realistic job.
func benchLookup(b *testing.B, st *Store, keys []string, miss string, f func(context.Context, []string) ([]*Record, error)) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	batch := make([]string, 500)
	cpu := startCPU(b, st.rdb)
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			if i%10 == 0 {
				batch[i] = miss + strconv.Itoa(r.IntN(1e9))
			} else {
				batch[i] = keys[r.IntN(len(keys))]
			}
		}
		got, err := f(ctx, batch)
		if err != nil || got[1] == nil {
			b.Fatalf("lookup: %v", err)
		}
	}
	b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "inputs/s")
	cpu.report(float64(b.N), "op")
}

func BenchmarkByNetworkURL500(b *testing.B) {
	st, urls, _ := loadedStore(b)
	benchLookup(b, st, urls, "https://www.network.example/company/missing-", st.ByNetworkURL)
}

func BenchmarkByDomain500(b *testing.B) {
	st, _, domains := loadedStore(b)
	benchLookup(b, st, domains, "missing.example", st.ByDomain)
}

// BenchmarkMemoryPerRecord is a one-off measurement: the growth of Redis's
// used_memory after importing 100,000 generated records, per record.
func BenchmarkMemoryPerRecord(b *testing.B) {
	ctx := context.Background()
	rdb := benchClient(b)
	used := func() int64 {
		info, err := rdb.InfoMap(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	for b.Loop() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		before := used()
		st := NewStore(rdb, "bulkd:")
		if _, err := Import(ctx, bytes.NewReader(benchData()), FormatJSONL, st, stubNorm, nil); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(used()-before)/benchRecords, "bytes/record")
	}
	b.ReportMetric(float64(len(benchData()))/benchRecords, "jsonl-bytes/record")
}

func BenchmarkDecodeRecord(b *testing.B) {
	recs := generated(b, 100, 1)
	vals := make([]string, len(recs))
	for i := range recs {
		vals[i] = string(encodeRecord(nil, &recs[i]))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := decodeRecord(vals[i%len(vals)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScale1M is a one-off at the design size: it streams 1,000,000
// generated companies into a private redis-server (generator and importer
// running concurrently through a pipe), then reports memory per record and
// 500-input lookup latency. It takes a minute and about 1.5 GB of RAM, so
// it only runs with BULKD_BENCH_1M=1.
func BenchmarkScale1M(b *testing.B) {
	if os.Getenv("BULKD_BENCH_1M") != "1" {
		b.Skip("set BULKD_BENCH_1M=1 to run")
	}
	const n = 1_000_000
	ctx := context.Background()
	rdb := benchClient(b)
	st := NewStore(rdb, "bulkd:")
	m := &cpuMeter{b: b, rdb: rdb}
	for b.Loop() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		info, _ := rdb.InfoMap(ctx, "memory").Result()
		before, _ := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(Generate(pw, n, 1, "network.example")) }()
		start := time.Now()
		r0 := m.redisCPU()
		s, err := Import(ctx, pr, FormatJSONL, st, stubNorm, nil)
		if err != nil || s.Imported != n {
			b.Fatalf("import: %v %+v", err, s)
		}
		b.ReportMetric(n/time.Since(start).Seconds(), "import-companies/s")
		b.ReportMetric((m.redisCPU()-r0)*1e6/n, "import-redis-cpu-µs/company")
		info, _ = rdb.InfoMap(ctx, "memory").Result()
		after, _ := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		b.ReportMetric(float64(after-before)/n, "bytes/record")
	}
	// Lookups against the full data set: every 2,000th company's URL.
	var urls []string
	g := newGenerator(n, 1, "network.example")
	for i := 0; i < n; i += 2000 {
		urls = append(urls, g.networkURL(g.core(i).slug))
	}
	r := rand.New(rand.NewPCG(3, 4))
	batch := make([]string, 500)
	const rounds = 200
	lat := make([]time.Duration, 0, rounds)
	for range rounds {
		for i := range batch {
			batch[i] = urls[r.IntN(len(urls))]
		}
		t0 := time.Now()
		if _, err := st.ByNetworkURL(ctx, batch); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[rounds/2].Microseconds())/1000, "lookup500-p50-ms")
	b.ReportMetric(float64(lat[rounds*99/100].Microseconds())/1000, "lookup500-p99-ms")
}
