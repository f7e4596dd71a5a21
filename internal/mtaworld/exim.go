package mtaworld

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// startExim writes one Exim 4 configuration (the rcpt ACL is Exim's
// default configure's, with the postmaster's additions) and runs the
// unpacked exim4-daemon-light binary as a foreground daemon with -C.
// Exim keeps the replies its ACLs give by default: no message = lines.
func (w *World) startExim(ctx context.Context, s *Server) error {
	s.dir = filepath.Join(w.opts.Dir, s.Name)
	spool, logDir := filepath.Join(s.dir, "spool"), filepath.Join(s.dir, "log")
	for _, d := range []string{spool, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := chownMail(d); err != nil {
			return err
		}
	}
	var mb strings.Builder
	for _, a := range w.mailboxes(s) {
		fmt.Fprintf(&mb, "%s: ok\n", a)
	}
	boxes := filepath.Join(s.dir, "mailboxes")
	if err := writeFile(boxes, mb.String()); err != nil {
		return err
	}
	var opts, acl string
	switch s.Name {
	case "exim-ratelimit":
		opts = "smtp_accept_max_per_host = 2"
		acl = "  defer   ratelimit = 12 / 10s / per_rcpt\n"
	case "exim-conn":
		opts = "smtp_accept_max_per_host = 1\nrecipients_max = 10"
	}
	conf := fmt.Sprintf(`# Exim instance %[1]s of the real-MTA world (internal/mtaworld).
exim_user = mail
exim_group = mail
primary_hostname = %[2]s
domainlist local_domains = %[3]s
domainlist relay_to_domains =
hostlist   relay_from_hosts =
local_interfaces = %[4]s
daemon_smtp_ports = %[5]d
spool_directory = %[6]s
log_file_path = %[7]s/%%slog
pid_file_path = %[8]s/exim.pid
log_selector = +smtp_connection
tls_advertise_hosts =
keep_environment =
acl_smtp_rcpt = acl_check_rcpt
# The postmaster's settings:
%[9]s

begin acl

acl_check_rcpt:
  accept  hosts = :
  deny    domains = +local_domains
          local_parts = ^[.] : ^.*[@%%!/|]
%[10]s  require domains = +local_domains : +relay_to_domains
  require verify = recipient
  accept

begin routers

mailbox:
  driver = accept
  domains = +local_domains
  condition = ${lookup{$local_part@$domain}lsearch{%[11]s}{yes}{no}}
  transport = devnull

begin transports

devnull:
  driver = appendfile
  file = /dev/null
  user = mail
`, s.Name, s.Host, strings.Join(s.Domains, " : "), s.IP, w.port, spool, logDir, s.dir, opts, acl, boxes)
	cfg := filepath.Join(s.dir, "exim.conf")
	if err := writeFile(cfg, conf); err != nil {
		return err
	}
	cmd, err := w.spawn(ctx, filepath.Join(s.dir, "exim.out"), nil,
		filepath.Join(w.opts.Root, "usr/sbin/exim4"), "-C", cfg, "-bdf", "-oX", strconv.Itoa(w.port))
	s.cmd = cmd
	return err
}
