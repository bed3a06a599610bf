package verbs

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
)

// Config configures one rank's verbs transport.
type Config struct {
	Rank ftrma.Rank
	Size int
	// Device is the RDMA device to use (e.g. "mlx5_0", "rxe0"); "" chooses
	// the first device with an active port (see Select).
	Device string
	// Port is the device port; 0 means 1.
	Port int
	// GIDIndex is the GID table index to address this rank by; negative
	// chooses the RoCE v2 GID of the port's network interface's IPv4
	// address (0 on InfiniBand).
	GIDIndex int
	// Spin is how long a waiter polls the completion queue before it parks
	// and the progress goroutine waits on the completion channel; 0 means
	// 20µs, negative never spins.
	Spin time.Duration
	// Bound is the failure detector's bound: the queue pairs' retry timeout
	// is chosen so that a peer that stopped answering fails operations
	// within it. 0 means one second.
	Bound time.Duration
	// Logger reports lost peers (warnings), with the field rank; nil means
	// ftrma.Logger().
	Logger *slog.Logger
	// Absent lists the ranks that have not started (the spares of a job
	// started with spares, not yet admitted). Their queue pairs are made
	// at Open, with receive buffers posted, and stay in INIT (the device
	// drops what arrives) until Admit (transport.Admitter); until then
	// operations and messages toward them fail with transport.ErrAbsent.
	// Connect skips them, whatever their address.
	Absent []ftrma.Rank
	// Late is set for a rank that starts after the job did (a spare being
	// admitted). Its Connect brings its queue pairs toward the live ranks
	// (those with an address) to ready-to-send but posts nothing toward a
	// rank until that rank has admitted it and said hello: operations wait
	// for it, messages are queued (see Admit).
	Late bool
}

func (c *Config) validate() error {
	if c.Size < 1 || c.Rank < 0 || int(c.Rank) >= c.Size {
		return fmt.Errorf("verbs: rank %d of %d: %w", c.Rank, c.Size, ftrma.ErrInvalid)
	}
	if c.Size > 1<<16 {
		return fmt.Errorf("verbs: %d ranks, at most %d: %w", c.Size, 1<<16, ftrma.ErrInvalid)
	}
	for _, r := range c.Absent {
		if r < 0 || int(r) >= c.Size || r == c.Rank {
			return fmt.Errorf("verbs: absent rank %d (this is rank %d of %d): %w", r, c.Rank, c.Size, ftrma.ErrInvalid)
		}
	}
	if c.Port == 0 {
		c.Port = 1
	}
	switch {
	case c.Spin == 0:
		c.Spin = 20 * time.Microsecond
	case c.Spin < 0:
		c.Spin = 0
	}
	if c.Bound <= 0 {
		c.Bound = time.Second
	}
	if c.Logger == nil {
		c.Logger = ftrma.Logger()
	}
	return nil
}

// Address is what a rank publishes through the rendezvous: how to reach its
// port, where its key table is, and the number of its queue pair for each
// rank (peers connect their queue pair for it to that one).
type Address struct {
	GID      [16]byte
	LID      uint16
	PSN      uint32 // first packet sequence number of its queue pairs
	MTU      int    // active MTU (enum ibv_mtu)
	Table    uint64 // address and rkey of its key table
	TableKey uint32
	QPN      []uint32 // by rank
}

const addrPrefix = "verbs1:"

// String encodes a as "verbs1:GID/LID/PSN/MTU/TABLE/TABLEKEY/QPN,QPN,...",
// numbers in hexadecimal.
func (a Address) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%s/%x/%x/%x/%x/%x/", addrPrefix, hex.EncodeToString(a.GID[:]), a.LID, a.PSN, a.MTU, a.Table, a.TableKey)
	for i, q := range a.QPN {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(q), 16))
	}
	return b.String()
}

// ParseAddress decodes what Address.String produced.
func ParseAddress(s string) (Address, error) {
	var a Address
	bad := func(what string) (Address, error) {
		return Address{}, fmt.Errorf("verbs address %q: bad %s: %w", s, what, ftrma.ErrInvalid)
	}
	rest, ok := strings.CutPrefix(s, addrPrefix)
	if !ok {
		return bad("prefix (not a verbs transport address)")
	}
	f := strings.Split(rest, "/")
	if len(f) != 7 {
		return bad("field count")
	}
	g, err := hex.DecodeString(f[0])
	if err != nil || len(g) != 16 {
		return bad("GID")
	}
	copy(a.GID[:], g)
	num := func(s string, bits int) (uint64, bool) {
		v, err := strconv.ParseUint(s, 16, bits)
		return v, err == nil
	}
	var v uint64
	if v, ok = num(f[1], 16); !ok {
		return bad("LID")
	}
	a.LID = uint16(v)
	if v, ok = num(f[2], 24); !ok {
		return bad("PSN")
	}
	a.PSN = uint32(v)
	if v, ok = num(f[3], 8); !ok || v < 1 || v > 5 {
		return bad("MTU")
	}
	a.MTU = int(v)
	if a.Table, ok = num(f[4], 64); !ok {
		return bad("key table address")
	}
	if v, ok = num(f[5], 32); !ok {
		return bad("key table rkey")
	}
	a.TableKey = uint32(v)
	for _, q := range strings.Split(f[6], ",") {
		if v, ok = num(q, 24); !ok {
			return bad("queue pair number")
		}
		a.QPN = append(a.QPN, uint32(v))
	}
	return a, nil
}

// ackTimeout chooses the queue pairs' local ACK timeout exponent (4.096 µs ×
// 2^t) and retry count so that a peer that stopped answering fails its
// operations within bound: (retry+1) attempts of the timeout each.
func ackTimeout(bound time.Duration) (timeout, retry int) {
	retry = 6
	timeout = 10
	for t := 20; t > 10; t-- {
		if time.Duration(4096<<t)*time.Nanosecond*time.Duration(retry+1) <= bound {
			return t, retry
		}
	}
	return timeout, retry
}
