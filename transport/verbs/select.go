package verbs

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
	"github.com/vishvananda/netlink"
)

// ErrNoDevice reports that no RDMA device can be used: none is present, the
// one named is absent, or its port is down or has no suitable GID.
var ErrNoDevice = errors.New("verbs: no usable RDMA device")

// Choice is the device, port and GID a rank addresses its peers through.
type Choice struct {
	Device    string
	Port      int
	GIDIndex  int
	GID       net.IP
	LinkLayer string // "Ethernet" (RoCE) or "InfiniBand"
	Netdev    string // the GID's network interface (RoCE)
	Why       string // how it was chosen, for ftrun -v
}

// portInfo is what sysfs says about one port.
type portInfo struct {
	Device    string
	Port      int
	LinkLayer string
	Active    bool
	GIDs      []gidEntry
}

// gidEntry is one populated entry of a port's GID table.
type gidEntry struct {
	Index  int
	GID    net.IP
	Type   string // "RoCE v2", "IB/RoCE v1"
	Netdev string
}

// Select chooses the device, port and GID a rank uses. device "" means the
// first device (by name) with an active port; gidIndex < 0 means: on RoCE
// the RoCE v2 GID that is the IPv4-mapped address of the port's network
// interface (found with netlink), on InfiniBand index 0. It reads sysfs
// (with rdmamap) and fails with ErrNoDevice when nothing fits.
func Select(device string, port, gidIndex int) (Choice, error) {
	if port == 0 {
		port = 1
	}
	devs := rdmamap.GetRdmaDeviceList()
	if len(devs) == 0 {
		return Choice{}, fmt.Errorf("%w: %s lists no device", ErrNoDevice, rdmamap.RdmaClassDir)
	}
	sort.Strings(devs)
	if device != "" {
		found := false
		for _, d := range devs {
			found = found || d == device
		}
		if !found {
			return Choice{}, fmt.Errorf("%w: no device %q (present: %s)", ErrNoDevice, device, strings.Join(devs, ", "))
		}
		devs = []string{device}
	}
	var ports []portInfo
	for _, d := range devs {
		ports = append(ports, readPort(d, port, gidIndex))
	}
	return choose(ports, gidIndex, interfaceIPv4)
}

// choose is Select's decision over what sysfs said: the first active port
// with a suitable GID.
func choose(ports []portInfo, gidIndex int, ipv4 func(netdev string) []net.IP) (Choice, error) {
	var why []string
	for _, p := range ports {
		if !p.Active {
			why = append(why, fmt.Sprintf("%s port %d is not active", p.Device, p.Port))
			continue
		}
		c := Choice{Device: p.Device, Port: p.Port, LinkLayer: p.LinkLayer, GIDIndex: -1}
		if gidIndex >= 0 {
			for _, g := range p.GIDs {
				if g.Index == gidIndex {
					c.GIDIndex, c.GID, c.Netdev = g.Index, g.GID, g.Netdev
				}
			}
			if c.GIDIndex < 0 {
				why = append(why, fmt.Sprintf("%s port %d has no GID at index %d", p.Device, p.Port, gidIndex))
				continue
			}
			c.Why = fmt.Sprintf("%s port %d, GID index %d as asked (%s)", p.Device, p.Port, gidIndex, c.GID)
			return c, nil
		}
		if p.LinkLayer != "Ethernet" {
			for _, g := range p.GIDs {
				if g.Index == 0 {
					c.GIDIndex, c.GID = 0, g.GID
					c.Why = fmt.Sprintf("%s port %d (%s), GID index 0", p.Device, p.Port, p.LinkLayer)
					return c, nil
				}
			}
			why = append(why, fmt.Sprintf("%s port %d has no GID", p.Device, p.Port))
			continue
		}
		for _, g := range p.GIDs {
			if g.Type != "RoCE v2" || g.GID.To4() == nil {
				continue
			}
			for _, ip := range ipv4(g.Netdev) {
				if ip.Equal(g.GID) {
					c.GIDIndex, c.GID, c.Netdev = g.Index, g.GID, g.Netdev
					c.Why = fmt.Sprintf("%s port %d, RoCE v2 GID index %d = %s of %s", p.Device, p.Port, g.Index, ip, g.Netdev)
					return c, nil
				}
			}
		}
		why = append(why, fmt.Sprintf("%s port %d has no RoCE v2 GID matching an IPv4 address of its interface", p.Device, p.Port))
	}
	return Choice{}, fmt.Errorf("%w: %s", ErrNoDevice, strings.Join(why, "; "))
}

// maxGIDGap is how many empty GID table entries in a row end the scan: the
// table has a thousand entries or more (Soft-RoCE: 1024), the populated ones
// sit at the start, and every sysfs read costs a system call.
const maxGIDGap = 16

// readPort reads one port's state and GID table from sysfs: only entry only
// when it is not negative, else the entries up to the first maxGIDGap empty
// ones in a row.
func readPort(device string, port, only int) portInfo {
	dir := filepath.Join(rdmamap.RdmaClassDir, device, rdmamap.RdmaPortsdir, strconv.Itoa(port))
	p := portInfo{Device: device, Port: port}
	p.LinkLayer = readLine(filepath.Join(dir, "link_layer"))
	p.Active = strings.HasSuffix(readLine(filepath.Join(dir, "state")), "ACTIVE")
	first, gap := 0, 0
	if only >= 0 {
		first = only
	}
	for i := first; gap < maxGIDGap && (only < 0 || i == only); i++ {
		name := strconv.Itoa(i)
		line, err := os.ReadFile(filepath.Join(dir, "gids", name))
		if err != nil {
			break // past the end of the table
		}
		gid := net.ParseIP(strings.TrimSpace(string(line)))
		if gid == nil || gid.IsUnspecified() {
			gap++
			continue
		}
		gap = 0
		p.GIDs = append(p.GIDs, gidEntry{
			Index:  i,
			GID:    gid,
			Type:   readLine(filepath.Join(dir, rdmamap.RdmaGidAttrDir, "types", name)),
			Netdev: readLine(filepath.Join(dir, rdmamap.RdmaGidAttrDir, rdmamap.RdmaGidAttrNdevDir, name)),
		})
	}
	return p
}

func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// interfaceIPv4 lists the IPv4 addresses of a network interface.
func interfaceIPv4(name string) []net.IP {
	if name == "" {
		return nil
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return nil
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	var ips []net.IP
	for _, a := range addrs {
		ips = append(ips, a.IP)
	}
	return ips
}
