package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// The worlds the suite's jobs are answered against, all on loopback and all
// in this process: the company dataset (generated and imported into the
// suite's Redis) with a forward proxy standing in for every website (as
// `loadgen company` does), and one mail world (internal/mailworld) holding
// the benchmark's verification domains and the People world's companies for
// lookups (as `loadgen verify` and `loadgen lookup` do). Every row a client
// submits carries what its answer must be.

// ---- companies ----

type companyRef struct {
	networkURL string // https://www.linkedin.com/company/<slug>
	domain     string // website domain, "" when the company has none
}

type companyWorld struct {
	known []companyRef
}

// loadCompanies generates n fictional companies and imports them.
func loadCompanies(ctx context.Context, rdb *redis.Client, n int) (*companyWorld, error) {
	var buf bytes.Buffer
	if err := company.Generate(&buf, n, 11, "linkedin.com"); err != nil {
		return nil, err
	}
	w := &companyWorld{}
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			NetworkURL string  `json:"network_url"`
			Domain     *string `json:"domain"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("generated company: %w", err)
		}
		ref := companyRef{networkURL: r.NetworkURL}
		if r.Domain != nil {
			ref.domain = *r.Domain
		}
		w.known = append(w.known, ref)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	st := company.NewStore(rdb, "bulkd:")
	if _, err := company.Import(ctx, bytes.NewReader(buf.Bytes()), company.FormatJSONL, st, normalize.New(normalize.DefaultHosts), nil); err != nil {
		return nil, fmt.Errorf("import companies: %w", err)
	}
	return w, nil
}

// redirects says whether the website stand-in redirects host elsewhere:
// one host in ten, by hash, so the truth needs no table.
func redirects(host string) bool {
	h := fnv.New32a()
	_, _ = io.WriteString(h, strings.TrimPrefix(strings.ToLower(host), "www."))
	return h.Sum32()%10 == 0
}

const redirectTarget = "elsewhere.example"

// websiteProxy is a forward proxy on loopback that answers every website
// request itself (bulkd --http-proxy): a redirect to
// http://www.elsewhere.example/ for the hosts redirects picks, 200 for the
// rest. It never goes down: the suite's faults are bulkd's and Redis's.
func websiteProxy() (addr string, closeFn func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			http.Error(w, "no TLS here", http.StatusBadGateway)
			return
		}
		host := r.URL.Hostname()
		if host == "" {
			host, _, _ = strings.Cut(r.Host, ":")
		}
		if redirects(host) && !strings.HasSuffix(host, redirectTarget) {
			w.Header().Set("Location", "http://www."+redirectTarget+"/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		_, _ = io.WriteString(w, "<html><body>welcome</body></html>")
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// companyRow is one submitted company row and its truth.
type companyRow struct {
	body     map[string]string
	input    string
	result   string // found, not_found, invalid_url
	credits  int    // 1 on the first row of a distinct input
	redirect *bool  // domain rows: whether the website redirects
}

// companyJob builds the rows of one company submission: known companies
// by network URL and by domain, unknown ones, repeats written differently
// (free), invalid rows (free).
func (w *companyWorld) companyJob(rng *rand.Rand, rows int, seq int) []companyRow {
	var out []companyRow
	seen := map[string]bool{}
	add := func(r companyRow, key string) {
		if r.result != "invalid_url" && !seen[key] {
			seen[key] = true
			r.credits = 1
		}
		out = append(out, r)
	}
	type prior struct {
		r   companyRow
		key string
	}
	var firsts []prior
	for len(out) < rows {
		x := rng.Float64()
		switch {
		case x < 0.40:
			c := w.known[rng.Intn(len(w.known))]
			r := companyRow{body: map[string]string{"network_url": c.networkURL}, input: c.networkURL, result: "found"}
			f := false
			r.redirect = &f
			add(r, "n:"+c.networkURL)
			firsts = append(firsts, prior{r, "n:" + c.networkURL})
		case x < 0.65:
			c := w.known[rng.Intn(len(w.known))]
			if c.domain == "" {
				continue
			}
			red := redirects(c.domain)
			r := companyRow{body: map[string]string{"domain": c.domain}, input: c.domain, result: "found", redirect: &red}
			add(r, "d:"+c.domain)
			firsts = append(firsts, prior{r, "d:" + c.domain})
		case x < 0.80:
			u := fmt.Sprintf("https://www.linkedin.com/company/soak-missing-%d", rng.Intn(1_000_000))
			f := false
			add(companyRow{body: map[string]string{"network_url": u}, input: u, result: "not_found", redirect: &f}, "n:"+u)
		case x < 0.85:
			d := fmt.Sprintf("soak-missing-%d.example", rng.Intn(1_000_000))
			red := redirects(d)
			add(companyRow{body: map[string]string{"domain": d}, input: d, result: "not_found", redirect: &red}, "d:"+d)
		case x < 0.95:
			if len(firsts) == 0 {
				continue
			}
			p := firsts[rng.Intn(len(firsts))]
			r := p.r
			if u, ok := r.body["network_url"]; ok {
				u = strings.TrimPrefix(u, "https://www.") + "/about/" // the same company, written differently
				r.body, r.input = map[string]string{"network_url": u}, u
			} else {
				d := "WWW." + strings.ToUpper(r.body["domain"])
				r.body, r.input = map[string]string{"domain": d}, d
			}
			add(r, p.key)
		default:
			var r companyRow
			if rng.Intn(2) == 0 {
				u := fmt.Sprintf("https://www.linkedin.com/in/soak-person-%d-%d", seq, len(out))
				r = companyRow{body: map[string]string{"network_url": u}, input: u}
			} else {
				r = companyRow{body: map[string]string{"domain": "not a domain"}, input: "not a domain"}
			}
			r.result = "invalid_url"
			add(r, "")
		}
	}
	return out
}

func companyBody(rows []companyRow) []byte {
	in := make([]map[string]string, len(rows))
	for i, r := range rows {
		in[i] = r.body
	}
	b, _ := json.Marshal(map[string]any{"input": in})
	return b
}

// ---- mail ----

// mailWorld is one mailworld.World serving two specs: the verification
// benchmark's domains (renamed with a "v-" prefix) and the People world.
type mailWorld struct {
	w      *mailworld.World
	verify []mailworld.Case // addresses with their expected verdict
	people []mailworld.PersonCase
}

// prefixSpec renames every host and domain of s (and its cases) so it can
// share one world with another spec.
func prefixSpec(s mailworld.Spec, p string) mailworld.Spec {
	out := mailworld.Spec{RTT: s.RTT}
	for _, h := range s.Hosts {
		h.Name = p + h.Name
		out.Hosts = append(out.Hosts, h)
	}
	for _, d := range s.Domains {
		d.Name = p + d.Name
		mx := make([]string, len(d.MX))
		for i, m := range d.MX {
			mx[i] = p + m
		}
		d.MX = mx
		out.Domains = append(out.Domains, d)
	}
	for _, c := range s.Cases {
		if local, dom, ok := strings.Cut(c.Email, "@"); ok && dom != "" {
			c.Email = local + "@" + p + dom
		}
		out.Cases = append(out.Cases, c)
	}
	return out
}

func startMailWorld(ctx context.Context, rtt time.Duration, maxConns int, verifyDomains, peopleDomains int) (*mailWorld, error) {
	bench := prefixSpec(mailworld.Bench(mailworld.BenchOptions{Domains: verifyDomains, PerDomain: 10, RTT: rtt, MaxConnsPerHost: maxConns, Seed: 3}), "v-")
	people, cases := mailworld.People(mailworld.PeopleOptions{Domains: peopleDomains, PerDomain: 10, RTT: rtt, Seed: 5,
		Greylist: 2 * time.Second, MaxConnsPerHost: maxConns})
	spec := mailworld.Spec{RTT: rtt, Hosts: append(bench.Hosts, people.Hosts...), Domains: append(bench.Domains, people.Domains...),
		Cases: bench.Cases}
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("mail world: %w", err)
	}
	var knowable []mailworld.Case
	for _, c := range bench.Cases {
		if c.Knowable && strings.Contains(c.Email, "@") {
			knowable = append(knowable, c)
		}
	}
	if len(knowable) == 0 || len(cases) == 0 {
		w.Close()
		return nil, errors.New("mail world: no cases")
	}
	return &mailWorld{w: w, verify: knowable, people: cases}, nil
}

// verifyRow is one unique address of a verification job and its truth.
type verifyRow struct {
	email  string // as first submitted
	status string
	reason string
}

// verifyJob picks n addresses; some are repeated written differently (one
// row, charged once).
func (m *mailWorld) verifyJob(rng *rand.Rand, n int) (body []byte, rows []verifyRow) {
	seen := map[string]bool{}
	var emails []string
	for len(rows) < n {
		c := m.verify[rng.Intn(len(m.verify))]
		key := strings.ToLower(c.Email)
		if seen[key] {
			continue
		}
		seen[key] = true
		emails = append(emails, c.Email)
		rows = append(rows, verifyRow{email: c.Email, status: c.Status, reason: c.Reason})
		if rng.Intn(10) == 0 { // the same address again, its domain in capitals
			local, dom, _ := strings.Cut(c.Email, "@")
			emails = append(emails, local+"@"+strings.ToUpper(dom))
		}
	}
	body, _ = json.Marshal(map[string]any{"emails": emails})
	return body, rows
}

type lookupIn struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Domain    string `json:"domain"`
}

// lookupJob picks n people; some are repeated written differently.
func (m *mailWorld) lookupJob(rng *rand.Rand, n int) (body []byte, rows []mailworld.PersonCase) {
	seen := map[string]bool{}
	var in []lookupIn
	for len(rows) < n {
		c := m.people[rng.Intn(len(m.people))]
		key := strings.ToLower(c.FirstName + "\x00" + c.LastName + "\x00" + c.Domain)
		if seen[key] {
			continue
		}
		seen[key] = true
		in = append(in, lookupIn{c.FirstName, c.LastName, c.Domain})
		rows = append(rows, c)
		if rng.Intn(10) == 0 {
			in = append(in, lookupIn{" " + strings.ToLower(c.FirstName), strings.ToUpper(c.LastName), strings.ToUpper(c.Domain)})
		}
	}
	body, _ = json.Marshal(map[string]any{"input": in})
	return body, rows
}
