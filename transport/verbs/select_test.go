package verbs

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

func TestAddressRoundTrip(t *testing.T) {
	a := Address{LID: 7, PSN: 0xabcdef, MTU: 3, Table: 0x7f12_3456_7000, TableKey: 0x1234, QPN: []uint32{0x11, 0, 0xffffff}}
	copy(a.GID[:], net.ParseIP("::ffff:198.18.0.1"))
	b, err := ParseAddress(a.String())
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != a.String() || b.GID != a.GID || b.QPN[2] != 0xffffff || b.Table != a.Table {
		t.Fatalf("round trip: %q became %+v", a.String(), b)
	}
	good := a.String()
	for _, bad := range []string{
		"", "tcp:127.0.0.1:5", "verbs1:", strings.Replace(good, "verbs1:", "verbs2:", 1),
		good[:len(good)-1] + "g",                          // a QPN that is not hex
		good + ",1000000",                                 // a QPN beyond 24 bits
		strings.Replace(good, "/3/", "/9/", 1),            // no such MTU
		strings.Replace(good, good[7:39], "00", 1),        // a short GID
		strings.Replace(good, "/abcdef/", "/1abcdef/", 1), // PSN beyond 24 bits
	} {
		if _, err := ParseAddress(bad); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("ParseAddress(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestChoose(t *testing.T) {
	v4 := func(dev string) []net.IP {
		return map[string][]net.IP{"eth0": {net.ParseIP("10.0.0.9"), net.ParseIP("198.18.0.2")}}[dev]
	}
	roce := portInfo{Device: "rxe0", Port: 1, LinkLayer: "Ethernet", Active: true, GIDs: []gidEntry{
		{0, net.ParseIP("fe80::5054:ff:fe00:2"), "IB/RoCE v1", "eth0"},
		{1, net.ParseIP("fe80::5054:ff:fe00:2"), "RoCE v2", "eth0"},
		{2, net.ParseIP("::ffff:198.18.0.2"), "IB/RoCE v1", "eth0"},
		{3, net.ParseIP("::ffff:198.18.0.2"), "RoCE v2", "eth0"},
	}}
	down := portInfo{Device: "mlx5_0", Port: 1, LinkLayer: "Ethernet", GIDs: roce.GIDs}
	ib := portInfo{Device: "mlx5_1", Port: 1, LinkLayer: "InfiniBand", Active: true, GIDs: []gidEntry{{0, net.ParseIP("fe80::1"), "IB/RoCE v1", ""}}}
	noIP := portInfo{Device: "rxe1", Port: 1, LinkLayer: "Ethernet", Active: true, GIDs: []gidEntry{{1, net.ParseIP("::ffff:10.9.9.9"), "RoCE v2", "eth1"}}}

	c, err := choose([]portInfo{down, roce}, -1, v4)
	if err != nil || c.Device != "rxe0" || c.GIDIndex != 3 || c.Netdev != "eth0" {
		t.Errorf("RoCE: %+v, %v (want rxe0, the RoCE v2 IPv4 GID at index 3)", c, err)
	}
	if c, err := choose([]portInfo{ib}, -1, v4); err != nil || c.GIDIndex != 0 {
		t.Errorf("InfiniBand: %+v, %v", c, err)
	}
	if c, err := choose([]portInfo{roce}, 1, v4); err != nil || c.GIDIndex != 1 {
		t.Errorf("GID index asked for: %+v, %v", c, err)
	}
	for name, ports := range map[string][]portInfo{
		"port down":         {down},
		"no matching IPv4":  {noIP},
		"no such GID index": {roce},
		"nothing at all":    nil,
	} {
		gid := -1
		if name == "no such GID index" {
			gid = 9
		}
		if _, err := choose(ports, gid, v4); !errors.Is(err, ErrNoDevice) {
			t.Errorf("%s: %v, want ErrNoDevice", name, err)
		}
	}
}

func TestAckTimeoutWithinBound(t *testing.T) {
	for _, bound := range []time.Duration{60 * time.Millisecond, 180 * time.Millisecond, time.Second, 10 * time.Second} {
		to, retry := ackTimeout(bound)
		total := time.Duration(4096<<to) * time.Nanosecond * time.Duration(retry+1)
		if to < 10 || to > 20 || (total > bound && to > 10) {
			t.Errorf("bound %v: timeout exponent %d, %d retries: %v in all", bound, to, retry, total)
		}
	}
}

// TestProbeOnThisHost: a host without an RDMA device (or a binary without
// verbs) gets a clear error, never a crash.
func TestProbeOnThisHost(t *testing.T) {
	c, err := Probe("", -1)
	if err != nil {
		if !Built || errors.Is(err, ErrNoDevice) || strings.Contains(err.Error(), "libibverbs") {
			t.Logf("verbs not usable here: %v", err)
			return
		}
		t.Fatalf("unexpected probe error: %v", err)
	}
	if c.Device == "" || c.GID == nil {
		t.Fatalf("probe chose %+v", c)
	}
}
