package arbiter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ftrma/ftrma"
)

// CommandKind names a command of the replicated log. The numbers are part
// of the log's format: append only.
type CommandKind uint8

const (
	// CmdRankExited: Rank's process ended with exit status Code.
	CmdRankExited CommandKind = 1
	// CmdRankFailed: Rank is failed for Reason.
	CmdRankFailed CommandKind = 2
	// CmdHostFailed: Host and every rank on it are failed for Reason.
	CmdHostFailed CommandKind = 3
	// CmdSpareAdmitted: spare Rank runs on Host from now on.
	CmdSpareAdmitted CommandKind = 4
	// CmdSpareClaimed: spare Rank starts on Host, claimed by the node of
	// host By, with the spawn's Payload (WIRING.md, spares without ftrun).
	CmdSpareClaimed CommandKind = 5
	// CmdSpareJoined: claimed spare Rank published its address Addr.
	CmdSpareJoined CommandKind = 6
	// CmdAddresses: Addrs[i] is the address of rank Rank+i.
	CmdAddresses CommandKind = 7
)

// Bounds of the variable fields of a command.
const (
	MaxAddr    = 1 << 10 // bytes of one address
	MaxPayload = 1 << 16 // bytes of a claim's payload
)

func (k CommandKind) String() string {
	switch k {
	case CmdRankExited:
		return "RankExited"
	case CmdRankFailed:
		return "RankFailed"
	case CmdHostFailed:
		return "HostFailed"
	case CmdSpareAdmitted:
		return "SpareAdmitted"
	case CmdSpareClaimed:
		return "SpareClaimed"
	case CmdSpareJoined:
		return "SpareJoined"
	case CmdAddresses:
		return "Addresses"
	}
	return fmt.Sprintf("CommandKind(%d)", uint8(k))
}

// Reason says why a rank or host was declared failed. The numbers are part
// of the log's format: append only.
type Reason uint8

const (
	ReasonNone Reason = 0
	// ReasonHostSilent: the host asked for no lease for a term and a margin
	// after its last grant (it is cut off, or its node is gone).
	ReasonHostSilent Reason = 1
	// ReasonProbeUnanswered: the host did not answer the probe of one of
	// its ranks within half a term; the leader stopped renewing its lease
	// and waited it out.
	ReasonProbeUnanswered Reason = 2
	// ReasonUnresponsive: the rank's host answered a probe saying the rank
	// does not answer (and no longer acts: see Node.ProbeAnswer).
	ReasonUnresponsive Reason = 3
	// ReasonHostFailed: the rank's host was declared failed.
	ReasonHostFailed Reason = 4
	reasonEnd        Reason = 5
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonHostSilent:
		return "host silent"
	case ReasonProbeUnanswered:
		return "probe unanswered"
	case ReasonUnresponsive:
		return "unresponsive"
	case ReasonHostFailed:
		return "host failed"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Command is one entry of the replicated log. Which fields count depends on
// Kind: Rank and Code for CmdRankExited, Rank and Reason for CmdRankFailed,
// Host and Reason for CmdHostFailed, Rank and Host for CmdSpareAdmitted,
// Rank, Host, By and Payload for CmdSpareClaimed, Rank and Addr for
// CmdSpareJoined, Rank (the first) and Addrs for CmdAddresses.
type Command struct {
	Kind    CommandKind
	Rank    ftrma.Rank
	Host    int
	Code    int
	Reason  Reason
	By      int
	Addr    string
	Payload string
	Addrs   []string
}

func (c Command) String() string {
	switch c.Kind {
	case CmdRankExited:
		return fmt.Sprintf("RankExited{rank %d, code %d}", c.Rank, c.Code)
	case CmdRankFailed:
		return fmt.Sprintf("RankFailed{rank %d, %v}", c.Rank, c.Reason)
	case CmdHostFailed:
		return fmt.Sprintf("HostFailed{host %d, %v}", c.Host, c.Reason)
	case CmdSpareAdmitted:
		return fmt.Sprintf("SpareAdmitted{rank %d, host %d}", c.Rank, c.Host)
	case CmdSpareClaimed:
		return fmt.Sprintf("SpareClaimed{rank %d, host %d, by %d, payload %d bytes}", c.Rank, c.Host, c.By, len(c.Payload))
	case CmdSpareJoined:
		return fmt.Sprintf("SpareJoined{rank %d, %q}", c.Rank, c.Addr)
	case CmdAddresses:
		return fmt.Sprintf("Addresses{from rank %d, %d}", c.Rank, len(c.Addrs))
	}
	return c.Kind.String()
}

// ErrMalformed is wrapped by every error about bytes that break the format
// of a command or a message.
var ErrMalformed = errors.New("arbiter: malformed")

// AppendBinary appends the encoding of c to b: the kind byte, then the
// kind's fields as unsigned varints (Code as a signed varint, Reason as one
// byte). It never fails; the error is for encoding.BinaryAppender.
func (c Command) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, byte(c.Kind))
	switch c.Kind {
	case CmdRankExited:
		b = binary.AppendUvarint(b, uint64(c.Rank))
		b = binary.AppendVarint(b, int64(c.Code))
	case CmdRankFailed:
		b = binary.AppendUvarint(b, uint64(c.Rank))
		b = append(b, byte(c.Reason))
	case CmdHostFailed:
		b = binary.AppendUvarint(b, uint64(c.Host))
		b = append(b, byte(c.Reason))
	case CmdSpareAdmitted:
		b = binary.AppendUvarint(b, uint64(c.Rank))
		b = binary.AppendUvarint(b, uint64(c.Host))
	case CmdSpareClaimed:
		b = binary.AppendUvarint(b, uint64(c.Rank))
		b = binary.AppendUvarint(b, uint64(c.Host))
		b = binary.AppendUvarint(b, uint64(c.By))
		b = appendBytes(b, c.Payload)
	case CmdSpareJoined:
		b = binary.AppendUvarint(b, uint64(c.Rank))
		b = appendBytes(b, c.Addr)
	case CmdAddresses:
		b = binary.AppendUvarint(b, uint64(c.Rank))
		b = binary.AppendUvarint(b, uint64(len(c.Addrs)))
		for _, a := range c.Addrs {
			b = appendBytes(b, a)
		}
	}
	return b, nil
}

// appendBytes appends s with its length first (an unsigned varint).
func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encode is AppendBinary for callers that know it cannot fail.
func (c Command) encode() []byte {
	b, _ := c.AppendBinary(nil)
	return b
}

// ParseCommand decodes one command encoded by AppendBinary, all of b and
// nothing else. It accepts only the canonical encoding of a command whose
// fields are in range (ranks and hosts below 2^24, an exit code that fits
// 32 bits, a known reason), so that every entry a node applies means the
// same at every node. Errors wrap ErrMalformed; it never panics.
func ParseCommand(b []byte) (Command, error) {
	bad := func(what string) (Command, error) {
		return Command{}, fmt.Errorf("%w command (% x): %s", ErrMalformed, truncate(b), what)
	}
	if len(b) == 0 {
		return bad("empty")
	}
	c := Command{Kind: CommandKind(b[0])}
	p := b[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	reason := func() (Reason, bool) {
		if len(p) == 0 || Reason(p[0]) == ReasonNone || Reason(p[0]) >= reasonEnd {
			return 0, false
		}
		r := Reason(p[0])
		p = p[1:]
		return r, true
	}
	bytesUpTo := func(max int) (string, bool) {
		l, ok := uv()
		if !ok || l > uint64(max) || l > uint64(len(p)) {
			return "", false
		}
		s := string(p[:l])
		p = p[l:]
		return s, true
	}
	var v, w, x uint64
	ok := false
	switch c.Kind {
	case CmdRankExited:
		if v, ok = uv(); ok {
			var code int64
			var n int
			code, n = binary.Varint(p)
			if ok = n > 0 && code >= -1<<31 && code < 1<<31; ok {
				p = p[n:]
				c.Rank, c.Code = ftrma.Rank(v), int(code)
			}
		}
	case CmdRankFailed:
		if v, ok = uv(); ok {
			c.Rank = ftrma.Rank(v)
			c.Reason, ok = reason()
		}
	case CmdHostFailed:
		if v, ok = uv(); ok {
			c.Host = int(v)
			c.Reason, ok = reason()
		}
	case CmdSpareAdmitted:
		if v, ok = uv(); ok {
			if w, ok = uv(); ok {
				c.Rank, c.Host = ftrma.Rank(v), int(w)
			}
		}
	case CmdSpareClaimed:
		v, ok = uv()
		if ok {
			w, ok = uv()
		}
		if ok {
			x, ok = uv()
		}
		if ok {
			c.Rank, c.Host, c.By = ftrma.Rank(v), int(w), int(x)
			c.Payload, ok = bytesUpTo(MaxPayload)
		}
	case CmdSpareJoined:
		if v, ok = uv(); ok {
			c.Rank = ftrma.Rank(v)
			c.Addr, ok = bytesUpTo(MaxAddr)
			ok = ok && c.Addr != ""
		}
	case CmdAddresses:
		if v, ok = uv(); ok {
			c.Rank = ftrma.Rank(v)
			var n uint64
			// Each address takes a byte at least.
			if n, ok = uv(); ok && n >= 1 && n <= uint64(len(p)) && v+n <= maxRank {
				c.Addrs = make([]string, n)
				for i := range c.Addrs {
					if c.Addrs[i], ok = bytesUpTo(MaxAddr); !ok {
						break
					}
				}
			} else {
				ok = false
			}
		}
	default:
		return bad("unknown kind")
	}
	switch {
	case !ok:
		return bad("short or out of range")
	case len(p) != 0:
		return bad("trailing bytes")
	case v >= maxRank || w >= maxRank || x >= maxRank:
		return bad("rank or host out of range")
	case !bytes.Equal(c.encode(), b):
		return bad("not canonical")
	}
	return c, nil
}

// truncate shortens b for an error message.
func truncate(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}
