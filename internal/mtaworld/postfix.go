package mtaworld

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// postgreyPort is postgrey's port on base.60.
const postgreyPort = 10023

// startPostfix writes one Postfix instance (main.cf, master.cf, a queue
// directory that is also smtpd's chroot) and runs its master in the
// foreground. The binaries are the unpacked Debian package's; their
// shared libraries are found through LD_LIBRARY_PATH, which main.cf's
// import_environment passes on to every daemon.
func (w *World) startPostfix(ctx context.Context, s *Server, base string) error {
	root := w.opts.Root
	s.dir = filepath.Join(w.opts.Dir, s.Name)
	conf, queue, data := filepath.Join(s.dir, "conf"), filepath.Join(s.dir, "queue"), filepath.Join(s.dir, "data")
	if err := postfixDirs(conf, queue, data, base); err != nil {
		return err
	}
	domains, extra, err := w.postfixMaps(s, conf, base)
	if err != nil {
		return err
	}
	main := postfixMainCf(s, queue, data, root, conf, domains, extra)
	if err := writeFile(filepath.Join(conf, "main.cf"), main); err != nil {
		return err
	}
	master := fmt.Sprintf(`# service type private unpriv chroot wakeup maxproc command
%s:%d inet n - y - - smtpd
postlog   unix-dgram n  -       n       -       1       postlogd
anvil     unix  -       -       y       -       1       anvil
rewrite   unix  -       -       y       -       -       trivial-rewrite
proxymap  unix  -       -       n       -       -       proxymap
cleanup   unix  n       -       y       -       0       cleanup
`, s.IP, w.port)
	if err := writeFile(filepath.Join(conf, "master.cf"), master); err != nil {
		return err
	}
	cmd, err := w.spawn(ctx, filepath.Join(s.dir, "master.out"), []string{"LD_LIBRARY_PATH=" + filepath.Join(root, "usr/lib/postfix")},
		filepath.Join(root, "usr/lib/postfix/sbin/master"), "-c", conf, "-d")
	s.cmd = cmd
	return err
}

// postfixDirs makes an instance's directories: its configuration, data
// and queue directories, and the queue's chroot.
func postfixDirs(conf, queue, data, base string) error {
	for _, d := range []string{conf, data, filepath.Join(queue, "etc"), filepath.Join(queue, "pid")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The queue directories master and its daemons expect (what
	// `postfix post-install` would create), owned by mail_owner.
	for _, d := range []string{"public", "private", "incoming", "active", "deferred", "maildrop", "hold", "corrupt",
		"bounce", "defer", "trace", "flush", "saved"} {
		p := filepath.Join(queue, d)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
		if err := chownMail(p); err != nil {
			return err
		}
	}
	if err := chownMail(data); err != nil {
		return err
	}
	// smtpd's chroot: its resolver (DNS block list lookups, client name
	// lookups) asks dnsmasq; hosts and services as Debian's postfix
	// init script copies them.
	if err := writeFile(filepath.Join(queue, "etc/resolv.conf"), "nameserver "+base+".53\noptions timeout:1 attempts:2\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(queue, "etc/nsswitch.conf"), "hosts: files dns\nservices: files\n"); err != nil {
		return err
	}
	for _, f := range []string{"hosts", "services", "localtime"} {
		if b, err := os.ReadFile(filepath.Join("/etc", f)); err == nil {
			if err := writeFile(filepath.Join(queue, "etc", f), string(b)); err != nil {
				return err
			}
		}
	}
	return nil
}

// postfixMaps writes the instance's mailbox table (and, for the
// catch-all server, its alias table) and returns the
// virtual_mailbox_domains and the postmaster's settings for main.cf.
func (w *World) postfixMaps(s *Server, conf, base string) (domains, extra string, err error) {
	boxes := w.mailboxes(s)
	var mb strings.Builder
	for _, a := range boxes {
		fmt.Fprintf(&mb, "%s ok\n", a)
	}
	p := planOf(s.Name)
	extra = strings.ReplaceAll(p.settings, "POSTGREY", base+".60:"+strconv.Itoa(postgreyPort))
	domains = strings.Join(s.Domains, " ")
	if p.catchAll {
		// The postmaster's catch-all: every local part of the domain is
		// an alias of one mailbox on a second, internal domain.
		var al strings.Builder
		fmt.Fprintf(&mb, "catchall@mailbox.internal.test ok\n")
		for _, d := range s.Domains {
			fmt.Fprintf(&al, "@%s catchall@mailbox.internal.test\n", d)
		}
		if err := writeFile(filepath.Join(conf, "aliases"), al.String()); err != nil {
			return "", "", err
		}
		extra = "virtual_alias_domains = " + domains + "\nvirtual_alias_maps = texthash:" + filepath.Join(conf, "aliases")
		domains = "mailbox.internal.test"
	}
	if err := writeFile(filepath.Join(conf, "mailboxes"), mb.String()); err != nil {
		return "", "", err
	}
	return domains, extra, nil
}

// postfixMainCf is the instance's main.cf.
func postfixMainCf(s *Server, queue, data, root, conf, domains, extra string) string {
	return fmt.Sprintf(`# Postfix instance %[1]s of the real-MTA world (internal/mtaworld).
compatibility_level = 3.6
queue_directory = %[2]s
data_directory = %[3]s
daemon_directory = %[4]s/usr/lib/postfix/sbin
command_directory = %[4]s/usr/sbin
shlib_directory = %[4]s/usr/lib/postfix
meta_directory = %[5]s
mail_owner = mail
setgid_group = staff
default_privs = nobody
import_environment = MAIL_CONFIG MAIL_DEBUG MAIL_LOGTAG TZ LANG=C LD_LIBRARY_PATH
maillog_file = %[6]s/maillog
maillog_file_prefixes = %[6]s
myhostname = %[7]s
mydestination =
# Our client (127.0.0.1) is not a trusted network: it is the Internet.
mynetworks =
inet_interfaces = all
inet_protocols = ipv4
alias_maps =
alias_database =
local_recipient_maps =
virtual_mailbox_domains = %[8]s
virtual_mailbox_maps = texthash:%[5]s/mailboxes
virtual_transport = discard:
# Postfix exempts $mynetworks from the anvil limits by default; with no
# trusted networks the limits apply to every client, as on a real MX.
smtpd_client_event_limit_exceptions =
biff = no
# The postmaster's settings:
%[9]s
`, s.Name, queue, data, root, conf, s.dir, s.Host, domains, extra)
}

// chownMail gives a directory to Debian's "mail" system user, the
// instances' mail_owner (the package's own "postfix" user does not exist:
// the package is unpacked, not installed).
func chownMail(p string) error { return chownUser(p, "mail") }

func chownUser(p, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(p, uid, gid)
}
