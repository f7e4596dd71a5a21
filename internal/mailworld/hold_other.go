//go:build !linux

package mailworld

import (
	"io"
	"net"
	"strconv"
)

// holdPort checks that nothing listens on ip:port. Outside Linux it cannot
// keep the address taken without listening, so it only probes it.
func holdPort(ip string, port int) (io.Closer, error) {
	l, err := net.Listen("tcp4", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	l.Close()
	return nopCloser{}, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
