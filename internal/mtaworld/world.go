// Package mtaworld is a mail world of unmodified mail server software on
// loopback (issue 25): stock Postfix (with postgrey) and Exim 4 from
// Debian, each server configured the way postmasters configure them,
// dnsmasq as the authoritative DNS server and as a DNS block list that
// lists our client address. Every reply a verifier sees is whatever the
// real software sends: the world writes configuration, never reply text.
//
// Debian installs one MTA per system, so hack/ensure-mta.sh unpacks the
// postfix and exim4-daemon-light packages into a cache directory and the
// world runs their binaries from there, each server with its own
// configuration, queue, spool and log under Options.Dir. postgrey and
// dnsmasq are ordinary Debian packages.
//
// The world needs root: Postfix's smtpd runs chrooted into its queue
// directory (that is how its DNS block list lookups reach dnsmasq: the
// chroot has its own etc/resolv.conf, while the machine's resolver stays
// untouched), the libc resolver only talks to port 53, and the daemons
// drop privileges to system users. docs/mta-world.md describes the servers
// and the ground truth.
package mtaworld

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Truth is what an address really is.
type Truth string

const (
	// Deliverable: the mailbox exists on its server.
	Deliverable Truth = "deliverable"
	// Undeliverable: the server rejects it at RCPT as an unknown user.
	Undeliverable Truth = "undeliverable"
	// CatchAll: the domain accepts every local part (risky/catch_all).
	CatchAll Truth = "catch_all"
	// Blocked: the server refuses our client address (DNSBL), so the
	// answer can only be unknown/blocked.
	Blocked Truth = "blocked"
)

// Case is one address of the world and its ground truth.
type Case struct {
	Email  string
	Truth  Truth
	Server string // Server.Name
}

// Server is one running MTA.
type Server struct {
	Name     string // e.g. "postfix-anvil"
	Software string // "postfix" or "exim"
	IP       string
	Host     string   // its MX host name
	Domains  []string // the domains whose MX it is
	// Settings is what its postmaster configured, for the logs and docs.
	Settings string
	// ConnLimit is its configured concurrent connection limit per client
	// (0: the software's default, which this world's traffic never nears).
	ConnLimit int

	dir string
	cmd *exec.Cmd
}

// Options configure Start.
type Options struct {
	// Root is where hack/ensure-mta.sh unpacked postfix and exim4
	// (default: $BULKD_MTA_ROOT, else ~/.cache/bulkd-tools/mta).
	Root string
	// Dir holds every configuration, queue, spool and log. Default: a new
	// directory under the system's temporary directory, removed by Close.
	// Its path must be searchable by the daemons' users (mail, nobody,
	// postgrey): not under a 0700 directory such as t.TempDir().
	Dir string
	// Scale multiplies the addresses per domain (default 1: 228 addresses).
	Scale int
	// NoSlow leaves out the slow server (its domain and addresses), for
	// the first-pass comparison of issue 25's goal 5.
	NoSlow bool
	// GreylistDelay is postgrey's --delay (default 5s).
	GreylistDelay time.Duration
	// Seed chooses which local parts exist.
	Seed uint64
}

// World is a running set of servers.
type World struct {
	opts    Options
	port    int
	dnsAddr string
	servers []*Server
	cases   []Case
	procs   []*exec.Cmd
	dnsLog  string
	owned   string // Dir, when Start made it
	final   map[string]ServerStats
}

// ErrNotInstalled means the mail software is not there (run
// hack/ensure-mta.sh as root, which `make deps` does).
var ErrNotInstalled = errors.New("mtaworld: postfix/exim4/postgrey/dnsmasq not installed (run hack/ensure-mta.sh as root; `make deps` does)")

// ErrNotRoot means the world cannot run as this user.
var ErrNotRoot = errors.New("mtaworld: needs root (chrooted smtpd, DNS on port 53, daemons that drop privileges)")

// DefaultRoot is where hack/ensure-mta.sh unpacks the MTAs.
func DefaultRoot() string {
	if r := os.Getenv("BULKD_MTA_ROOT"); r != "" {
		return r
	}
	if c := os.Getenv("XDG_CACHE_HOME"); c != "" {
		return filepath.Join(c, "bulkd-tools", "mta")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "bulkd-tools", "mta")
}

// Available reports why the world cannot start here, or nil.
func Available(root string) error {
	if root == "" {
		root = DefaultRoot()
	}
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, p := range []string{filepath.Join(root, "usr/lib/postfix/sbin/master"), filepath.Join(root, "usr/sbin/exim4"),
		"/usr/sbin/postgrey", "/usr/sbin/dnsmasq"} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: %s missing", ErrNotInstalled, p)
		}
	}
	return nil
}

// Port is the SMTP port every server listens on (each on its own
// loopback address, so a verifier needs one port and one resolver).
const Port = 2525

// Start configures and starts the world; Close stops it.
func Start(ctx context.Context, opts Options) (*World, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot()
	}
	if err := Available(opts.Root); err != nil {
		return nil, err
	}
	var owned string
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "bulkd-mtaworld-")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
		opts.Dir, owned = d, d
	}
	if opts.Scale <= 0 {
		opts.Scale = 1
	}
	if opts.GreylistDelay <= 0 {
		opts.GreylistDelay = 5 * time.Second
	}
	base, err := freeBlock()
	if err != nil {
		return nil, err
	}
	w := &World{opts: opts, port: Port, dnsAddr: base + ".53:53", owned: owned}
	w.plan(base)
	if err := w.start(ctx, base); err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

// freeBlock picks a 127.B.C.0/24 block whose DNS address (.53:53) and
// SMTP port are free, so two worlds (or another helper's) never collide.
func freeBlock() (string, error) {
	for range 50 {
		base := fmt.Sprintf("127.%d.%d", 64+rand.IntN(180), 1+rand.IntN(250))
		u, err := net.ListenPacket("udp4", base+".53:53")
		if err != nil {
			continue
		}
		_ = u.Close()
		t, err := net.Listen("tcp4", base+".11:"+strconv.Itoa(Port))
		if err != nil {
			continue
		}
		_ = t.Close()
		return base, nil
	}
	return "", errors.New("mtaworld: no free 127.x.y.0/24 block")
}

// DNSAddr is dnsmasq's host:port.
func (w *World) DNSAddr() string { return w.dnsAddr }

// SMTPPort is every server's port.
func (w *World) SMTPPort() int { return w.port }

// Servers lists the servers.
func (w *World) Servers() []*Server { return w.servers }

// Cases are the world's addresses and their truth.
func (w *World) Cases() []Case { return append([]Case(nil), w.cases...) }

// ServerOf returns the server of a Case.
func (w *World) ServerOf(name string) *Server {
	for _, s := range w.servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (w *World) start(ctx context.Context, base string) error {
	if err := w.startDNS(ctx, base); err != nil {
		return err
	}
	if err := w.startPostgrey(ctx, base); err != nil {
		return err
	}
	for _, s := range w.servers {
		var err error
		switch s.Software {
		case "postfix":
			err = w.startPostfix(ctx, s, base)
		case "exim":
			err = w.startExim(ctx, s)
		}
		if err != nil {
			return fmt.Errorf("mtaworld: %s: %w", s.Name, err)
		}
	}
	// Every server answers its banner before Start returns.
	for _, s := range w.servers {
		if err := waitBanner(ctx, net.JoinHostPort(s.IP, strconv.Itoa(w.port)), 20*time.Second); err != nil {
			return fmt.Errorf("mtaworld: %s (%s): %w; its log: %s", s.Name, s.IP, err, tail(s.logFile(), 10))
		}
	}
	return nil
}

// waitBanner waits until the server greets with 220 (a probe that then
// quits; the Postfix servers log it like any client, from 127.0.0.1).
func waitBanner(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp4", addr)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			if rerr == nil && strings.HasPrefix(line, "220") {
				_, _ = c.Write([]byte("QUIT\r\n"))
				_ = c.Close()
				return nil
			}
			_ = c.Close()
			err = fmt.Errorf("banner %q: %v", strings.TrimSpace(line), rerr)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// spawn starts a daemon in its own process group (so Close ends it and
// its children, and nothing else).
func (w *World) spawn(ctx context.Context, logPath string, env []string, name string, args ...string) (*exec.Cmd, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	// Pdeathsig: a test binary killed by its timeout should leave no MTA
	// behind (Postfix's master ends its children when it goes). The kernel
	// forgets it when a daemon changes its user (dnsmasq, postgrey and
	// Exim do), so a killed process can leave those running: find them by
	// their command line, which names the world's directory.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w.procs = append(w.procs, cmd)
	return cmd, ctx.Err()
}

// Close stops every daemon (SIGTERM to its process group, SIGKILL after
// 5 s). The logs stay in Options.Dir for Stats.
func (w *World) Close() error {
	done := make(chan struct{})
	for _, c := range w.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	go func() {
		for _, c := range w.procs {
			_ = c.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		for _, c := range w.procs {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
		<-done
	}
	// Postfix's master signals its children and returns; give anvil a
	// moment to write its exit statistics to the log.
	time.Sleep(300 * time.Millisecond)
	w.procs = nil
	if w.final == nil {
		w.final = w.readStats()
	}
	if w.owned != "" {
		if err := os.RemoveAll(w.owned); err != nil {
			return err
		}
		w.owned = ""
	}
	return nil
}

func writeFile(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (s *Server) logFile() string {
	if s.Software == "exim" {
		return filepath.Join(s.dir, "log", "mainlog")
	}
	return filepath.Join(s.dir, "maillog")
}

// ServerStats is what a server's own log says about our traffic.
type ServerStats struct {
	// MaxConcurrent is the most connections from our client open at once,
	// as the server counted them (Postfix: the larger of anvil's "max
	// connection count" and the open sessions by smtpd's connect and
	// disconnect lines, both of which include a connection it then
	// refused; Exim: the "connection count" it logs per accepted
	// connection).
	MaxConcurrent int
	// Refused counts connections refused for the connection count or rate
	// limit.
	Refused int
	// Connections counts accepted connections.
	Connections int
	// Rejects counts logged RCPT rejections by their SMTP code.
	Rejects map[string]int
}

var (
	// anvil's ident is "service:client", the service being master.cf's
	// "ip:port".
	anvilMax     = regexp.MustCompile(`statistics: max connection count (\d+) for \(\S*:127\.0\.0\.1\)`)
	pfRefused    = regexp.MustCompile(`warning: Connection (concurrency|rate) limit exceeded`)
	pfConnect    = regexp.MustCompile(`postfix/smtpd\[\d+\]: connect from`)
	pfDisconnect = regexp.MustCompile(`postfix/smtpd\[\d+\]: disconnect from`)
	pfReject     = regexp.MustCompile(`(?:reject|NOQUEUE: reject): RCPT from [^:]*: (\d{3}) `)
	eximConn     = regexp.MustCompile(`SMTP connection from .*\(TCP/IP connection count = (\d+)\)`)
	eximRefused  = regexp.MustCompile(`refused: too many connections`)
	eximRejected = regexp.MustCompile(`(?:rejected|temporarily rejected) RCPT`)
)

// Stats reads every server's log. After Close it is what the logs said
// when the servers had stopped (with Postfix's final anvil statistics).
func (w *World) Stats() map[string]ServerStats {
	if w.final != nil {
		return w.final
	}
	return w.readStats()
}

func (w *World) readStats() map[string]ServerStats {
	out := map[string]ServerStats{}
	for _, s := range w.servers {
		st := ServerStats{Rejects: map[string]int{}}
		b, _ := os.ReadFile(s.logFile())
		open := 0 // Postfix: smtpd's connect/disconnect lines, in log order
		for _, line := range strings.Split(string(b), "\n") {
			switch s.Software {
			case "postfix":
				if m := anvilMax.FindStringSubmatch(line); m != nil {
					n, _ := strconv.Atoi(m[1])
					st.MaxConcurrent = max(st.MaxConcurrent, n)
				}
				if pfRefused.MatchString(line) {
					st.Refused++
				}
				if pfConnect.MatchString(line) {
					st.Connections++
					open++
					st.MaxConcurrent = max(st.MaxConcurrent, open)
				}
				if pfDisconnect.MatchString(line) {
					open--
				}
				if m := pfReject.FindStringSubmatch(line); m != nil {
					st.Rejects[m[1]]++
				}
			case "exim":
				if m := eximConn.FindStringSubmatch(line); m != nil {
					n, _ := strconv.Atoi(m[1])
					st.MaxConcurrent = max(st.MaxConcurrent, n)
					st.Connections++
				}
				if eximRefused.MatchString(line) {
					st.Refused++
				}
				if eximRejected.MatchString(line) {
					st.Rejects["rcpt"]++
				}
			}
		}
		// The readiness probe of Start is one connection.
		st.Connections = max(st.Connections-1, 0)
		out[s.Name] = st
	}
	return out
}

// Summary is one line per server for logs.
func (w *World) Summary() string {
	var b strings.Builder
	for _, s := range w.servers {
		fmt.Fprintf(&b, "%s %s %s: %s\n", s.Name, s.IP, strings.Join(s.Domains, ","), s.Settings)
	}
	return b.String()
}

// sortedKeys is for deterministic configuration files.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
