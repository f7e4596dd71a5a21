//go:build linux

package mailworld

import (
	"fmt"
	"io"
	"net"
	"syscall"
)

// holdPort binds a TCP socket to ip:port without listening on it: the
// address stays taken (so no other world can listen there) while every
// connection to it is refused with a RST. SO_REUSEADDR is deliberately not
// set, so a listener that sets it still cannot bind the same address.
func holdPort(ip string, port int) (io.Closer, error) {
	v4 := net.ParseIP(ip).To4()
	if v4 == nil {
		return nil, fmt.Errorf("not an IPv4 address: %q", ip)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrInet4{Port: port}
	copy(sa.Addr[:], v4)
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return heldPort(fd), nil
}

type heldPort int

func (h heldPort) Close() error { return syscall.Close(int(h)) }
