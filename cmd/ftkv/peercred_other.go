//go:build !linux

package main

import (
	"errors"
	"net"
)

// peerUID cannot tell the server's uid here: the client refuses to send.
func peerUID(conn net.Conn) (int, error) {
	return 0, errors.New("peer credentials are only read on Linux")
}
