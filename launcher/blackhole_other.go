//go:build !linux

package launcher

import (
	"errors"
	"net/netip"
)

var errNoBlackhole = errors.New("blackhole routes (--cut) need Linux")

func addBlackhole(netip.Addr) error { return errNoBlackhole }
func delBlackhole(netip.Addr) error { return nil }
func netAdminErr() error            { return errNoBlackhole }
