package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProbeStore shares each domain's catch-all probe address between
// processes. Greylisting keys on the recipient: a retry made by another
// process (a retry Job's pod, another API replica) must send the probe the
// first attempt sent, or the probe is greylisted again on every attempt and
// the domain's real addresses can never be confirmed.
type ProbeStore interface {
	// Probe returns domain's probe local part, storing fresh as it for ttl
	// when the domain has none yet.
	Probe(ctx context.Context, domain, fresh string, ttl time.Duration) (string, error)
}

// CatchAllStore shares what the verifier learned about domains between
// processes: each domain's catch-all verdict (its probe was accepted, or
// refused with a 5xx) and its probe address. Without it every pod, and
// every retry Job's pod, would probe each domain again: one more RCPT per
// domain and pod, to servers that count them.
type CatchAllStore interface {
	// Known returns what the store holds for domains; domains it knows
	// nothing about are absent from the map.
	Known(ctx context.Context, domains []string) (map[string]DomainKnowledge, error)
	// SetCatchAll records domain's verdict for ttl (overwriting an older
	// one: the newest probe is the best evidence).
	SetCatchAll(ctx context.Context, domain string, acceptsAll bool, ttl time.Duration) error
}

// DomainKnowledge is what a CatchAllStore knows about one domain.
type DomainKnowledge struct {
	// Verdict is 0 (none), 1 (the probe was accepted: catch-all) or 2 (the
	// probe was refused with a 5xx: addresses can be told apart).
	Verdict    int
	VerdictTTL time.Duration // how long the verdict has left
	Probe      string        // the probe local part, "" if none
	ProbeTTL   time.Duration
}

// RedisProbes is the ProbeStore and CatchAllStore in Redis: per domain one
// key for its probe (bulkd:smtp:probe:<domain>, set once, kept a day) and
// one for its verdict (bulkd:smtp:catchall:<domain>, "1" accepts all, "0"
// refuses the probe, kept Config.CatchAllTTL). Every operation touches one
// key (or pipelines independent single-key commands), so it works unchanged
// on Redis Cluster.
type RedisProbes struct {
	rdb      redis.UniversalClient
	prefix   string
	caPrefix string
}

// NewRedisProbes returns the store on rdb.
func NewRedisProbes(rdb redis.UniversalClient) *RedisProbes {
	return &RedisProbes{rdb: rdb, prefix: "bulkd:smtp:probe:", caPrefix: "bulkd:smtp:catchall:"}
}

// probeScript: KEYS = the domain's key. ARGV = fresh, ttl seconds.
var probeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
`)

// Probe implements ProbeStore.
func (p *RedisProbes) Probe(ctx context.Context, domain, fresh string, ttl time.Duration) (string, error) {
	return probeScript.Run(ctx, p.rdb, []string{p.prefix + domain}, fresh, int64(ttl/time.Second)).Text()
}

// knownChunk bounds one pipeline (4 commands a domain).
const knownChunk = 512

// Known implements CatchAllStore: one pipelined round trip per knownChunk
// domains (a cluster client splits the pipeline by node).
func (p *RedisProbes) Known(ctx context.Context, domains []string) (map[string]DomainKnowledge, error) {
	out := map[string]DomainKnowledge{}
	for len(domains) > 0 {
		part := domains[:min(len(domains), knownChunk)]
		domains = domains[len(part):]
		pipe := p.rdb.Pipeline()
		type cmds struct {
			verdict, probe       *redis.StringCmd
			verdictTTL, probeTTL *redis.DurationCmd
		}
		cs := make([]cmds, len(part))
		for i, d := range part {
			cs[i] = cmds{verdict: pipe.Get(ctx, p.caPrefix+d), verdictTTL: pipe.PTTL(ctx, p.caPrefix+d),
				probe: pipe.Get(ctx, p.prefix+d), probeTTL: pipe.PTTL(ctx, p.prefix+d)}
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read catch-all knowledge: %w", err)
		}
		for i, d := range part {
			var k DomainKnowledge
			if v, err := cs[i].verdict.Result(); err == nil {
				if ttl := cs[i].verdictTTL.Val(); ttl > 0 {
					k.VerdictTTL = ttl
					k.Verdict = 2
					if v == "1" {
						k.Verdict = 1
					}
				}
			}
			if v, err := cs[i].probe.Result(); err == nil && v != "" {
				if ttl := cs[i].probeTTL.Val(); ttl > 0 {
					k.Probe, k.ProbeTTL = v, ttl
				}
			}
			if k.Verdict != 0 || k.Probe != "" {
				out[d] = k
			}
		}
	}
	return out, nil
}

// SetCatchAll implements CatchAllStore.
func (p *RedisProbes) SetCatchAll(ctx context.Context, domain string, acceptsAll bool, ttl time.Duration) error {
	v := "0"
	if acceptsAll {
		v = "1"
	}
	if err := p.rdb.Set(ctx, p.caPrefix+domain, v, ttl).Err(); err != nil {
		return fmt.Errorf("store catch-all verdict of %s: %w", domain, err)
	}
	return nil
}

// loadKnowledge copies into the process's caches what the shared store
// knows about the domains that the caches do not hold.
func (v *Verifier) loadKnowledge(ctx context.Context, ds []*domainState) {
	now := time.Now()
	if now.UnixNano() < v.storeDown.Load() {
		return
	}
	var names []string
	for _, d := range ds {
		_, verdict := v.catchAll.get(d.name, now)
		_, probe := v.probes.get(d.name, now)
		if !verdict || !probe {
			names = append(names, d.name)
		}
	}
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	known, err := v.cfg.CatchAlls.Known(ctx, names)
	if err != nil {
		v.storeFailed(err)
		return
	}
	now = time.Now()
	for d, k := range known {
		if k.Verdict != 0 {
			v.catchAll.put(d, k.Verdict == 1, now.Add(min(k.VerdictTTL, localKnowledgeTTL)))
			catchAllVerdicts.WithLabelValues("shared").Inc()
		}
		if k.Probe != "" {
			v.probes.put(d, k.Probe, now.Add(min(k.ProbeTTL, localKnowledgeTTL)))
		}
	}
}

// noteVerdict caches a probe's verdict on domain in the process and, in the
// background, in the shared store. Only a 2xx or 5xx probe reply is a
// verdict; a 4xx or a blocked probe never reaches here.
func (v *Verifier) noteVerdict(domain string, acceptsAll bool) {
	catchAllVerdicts.WithLabelValues("probe").Inc()
	ttl := v.cfg.CatchAllTTL
	st := v.cfg.CatchAlls
	if st == nil {
		v.catchAll.put(domain, acceptsAll, time.Now().Add(ttl))
		return
	}
	v.catchAll.put(domain, acceptsAll, time.Now().Add(min(ttl, localKnowledgeTTL)))
	if time.Now().UnixNano() < v.storeDown.Load() {
		return
	}
	// Not on the session's path: the session goes on reading its replies.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		if err := st.SetCatchAll(ctx, domain, acceptsAll, ttl); err != nil {
			v.storeFailed(err)
		}
	}()
}

func (v *Verifier) storeFailed(err error) {
	until := time.Now().Add(storeRetry).UnixNano()
	if old := v.storeDown.Load(); old < time.Now().UnixNano() && v.storeDown.CompareAndSwap(old, until) {
		v.log.Warn("shared catch-all knowledge unavailable; probing without it", "err", err, "retry_in", storeRetry)
	}
}

// localProbeTTL is how long the process keeps a probe address by itself.
func (v *Verifier) localProbeTTL() time.Duration {
	if v.cfg.Probes != nil {
		return localKnowledgeTTL
	}
	return probeTTL
}
