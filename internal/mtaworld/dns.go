package mtaworld

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// startDNS runs dnsmasq as the authoritative server of the world's names
// on base.53:53 (port 53 because Postfix's DNS block list lookups go
// through the libc resolver, which cannot be given a port): an MX record
// per domain, an A record per MX host, and the block list zone
// bl.mtaworld.test listing 127.0.0.1 (our client) as 127.0.0.2, the
// standard "listed" answer (no TXT record, so Postfix's reply is its own).
// Every other name under .test is NXDOMAIN; nothing is forwarded.
func (w *World) startDNS(ctx context.Context, base string) error {
	dir := filepath.Join(w.opts.Dir, "dnsmasq")
	var b strings.Builder
	fmt.Fprintf(&b, "port=53\nlisten-address=%s.53\nbind-interfaces\nno-resolv\nno-hosts\nno-poll\nlocal=/test/\n", base)
	fmt.Fprintf(&b, "log-queries\nlog-facility=%s\n", filepath.Join(dir, "queries.log"))
	for _, s := range w.servers {
		fmt.Fprintf(&b, "host-record=%s,%s\n", s.Host, s.IP)
		for _, d := range s.Domains {
			fmt.Fprintf(&b, "mx-host=%s,%s,10\n", d, s.Host)
		}
	}
	b.WriteString("host-record=1.0.0.127.bl.mtaworld.test,127.0.0.2\n")
	conf := filepath.Join(dir, "dnsmasq.conf")
	if err := writeFile(conf, b.String()); err != nil {
		return err
	}
	w.dnsLog = filepath.Join(dir, "queries.log")
	_, err := w.spawn(ctx, filepath.Join(dir, "dnsmasq.out"), nil, "/usr/sbin/dnsmasq", "--keep-in-foreground",
		"--conf-file="+conf, "--pid-file="+filepath.Join(dir, "dnsmasq.pid"), "--user=nobody", "--group=nogroup")
	return err
}

// startPostgrey runs postgrey, the policy server of postfix-greylist, with
// its Debian defaults except the delay (short, so the test's retries pass
// it) and its own database directory.
func (w *World) startPostgrey(ctx context.Context, base string) error {
	dir := filepath.Join(w.opts.Dir, "postgrey")
	db := filepath.Join(dir, "db")
	if err := os.MkdirAll(db, 0o755); err != nil {
		return err
	}
	if err := chownUser(db, "postgrey"); err != nil {
		return err
	}
	_, err := w.spawn(ctx, filepath.Join(dir, "postgrey.log"), nil, "/usr/sbin/postgrey",
		"--inet="+base+".60:"+strconv.Itoa(postgreyPort), "--dbdir="+db, "--pidfile="+filepath.Join(dir, "postgrey.pid"),
		"--delay="+strconv.Itoa(int(w.opts.GreylistDelay.Seconds())))
	return err
}
