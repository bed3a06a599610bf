//go:build linux

package launcher

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// blackholeRoute is the route of --cut to a: a blackhole for a alone (/32,
// or /128) in the main table, where nothing of the host's own addresses
// lives (those are in the local table, consulted first).
func blackholeRoute(a netip.Addr) *netlink.Route {
	bits := a.BitLen()
	return &netlink.Route{Dst: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Type: unix.RTN_BLACKHOLE}
}

// addBlackhole drops every packet this host sends to a, replies included.
func addBlackhole(a netip.Addr) error {
	if err := netlink.RouteReplace(blackholeRoute(a)); err != nil {
		return fmt.Errorf("blackhole route to %v: %w", a, err)
	}
	return nil
}

// delBlackhole removes addBlackhole's route; one already gone is no error.
func delBlackhole(a netip.Addr) error {
	if err := netlink.RouteDel(blackholeRoute(a)); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("remove the blackhole route to %v: %w", a, err)
	}
	return nil
}

// netAdminErr says why this process cannot add blackhole routes, or nil:
// it needs CAP_NET_ADMIN in its effective set, and a netlink socket that
// answers (a route listing, which changes nothing).
func netAdminErr() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("cannot read its capabilities: %w", err)
	}
	if data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) == 0 {
		return errors.New("no CAP_NET_ADMIN (run it as root, or give it that capability)")
	}
	if _, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Type: unix.RTN_BLACKHOLE}, netlink.RT_FILTER_TYPE); err != nil {
		return fmt.Errorf("netlink does not answer: %w", err)
	}
	return nil
}
