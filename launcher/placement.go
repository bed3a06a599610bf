package launcher

// Rank placement: where the ranks of a job run. The hosts come from an Open
// MPI hostfile (ParseHostfile), an mpirun -H list (ParseHostList) or the Slurm
// allocation ftrun runs in (SlurmHosts); MapRanks then places the ranks by
// slot or by node, as mpirun --map-by does. The syntax and the placement
// follow Open MPI 5 (PRRTE) and Slurm so that hostfiles, -H lists and batch
// scripts written for mpirun work unchanged; where ftrun differs, the doc
// comment says so.

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ftrma/ftrma"
)

// Limits on placement input. They keep a typing slip (slots=1000000000,
// node[0-99999999]) from turning into a huge allocation.
const (
	maxHostSlots     = 1 << 20  // slots or max_slots of one host, in all its mentions
	maxPlacedRanks   = 1 << 20  // ranks MapRanks places
	maxNodelistHosts = 1 << 16  // host names one Slurm node list expands to
	maxHostNameLen   = 255      // bytes of a host name (DNS's limit)
	maxHostfileLine  = 64 << 10 // bytes of a hostfile line
)

// HostSlots is one host a job may place ranks on.
type HostSlots struct {
	// Name is the host name or address as written (an IPv6 address without
	// brackets). Never empty.
	Name string
	// Slots is how many ranks the host takes before it is full; >= 1.
	Slots int
	// MaxSlots is 0 for no hard limit (the host takes more ranks than Slots
	// only with --oversubscribe), else a hard cap >= Slots that even
	// --oversubscribe does not pass.
	MaxSlots int
}

// ParseHostfile reads an Open MPI hostfile. name is the file's name, used
// only in error messages ("launcher: hostfile hosts.txt:3: ...").
//
// Each line names one host, optionally followed by key=value settings:
//
//	NAME [slots=N] [max_slots=M]   # a comment
//
// NAME is a host name (a letter or digit, then letters, digits, '.', '-' and
// '_'), an IPv4 address, or an IPv6 address, bare or in brackets. N and M are
// decimal integers from 1 to 1048576. As in Open MPI, "cpu" and "count" are
// other names for "slots"; "max-slots", "slots_max", "slots-max", "cpu_max",
// "cpu-max", "max_cpu", "max-cpu", "count_max", "count-max", "max_count" and
// "max-count" are other names for "max_slots"; and spaces may surround the
// '='. '#' starts a comment that runs to the end of the line; blank lines are
// skipped.
//
// A line without slots gives its host one slot. (Open MPI counts the host's
// processor cores instead, but ftrun cannot know them before it reaches the
// host; write slots=N.) A line with max_slots but no slots gives the host
// max_slots slots, as in Open MPI. max_slots below slots is an error.
//
// A host named on several lines gets the sum of their slots, whatever the
// order of the lines (Open MPI refuses slots= on a repeated host, or adds one
// slot per mention, depending on the order). If any of its lines gives
// max_slots, the host's cap is the sum over its lines of max_slots, or of
// slots on lines without max_slots; if none does, it has no cap.
//
// Names are compared as written: "node1" and "node1.example.com" are two
// hosts. Open MPI's other hostfile syntax (user@host, ^host exclusions,
// +n0/+e relative nodes, /* */ and // comments, and keys such as port= or
// username=) is refused with an error, as are unknown keys. The hosts come
// back in the order of their first line; a file with no hosts is an error.
//
// Errors from r are returned wrapped; every other error wraps
// ftrma.ErrInvalid and names the file and line.
func ParseHostfile(r io.Reader, name string) ([]HostSlots, error) {
	var t hostTally
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxHostfileLine)
	line := 0
	for sc.Scan() {
		line++
		if err := t.addHostfileLine(sc.Text()); err != nil {
			return nil, fmt.Errorf("launcher: hostfile %s:%d: %w", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("launcher: hostfile %s:%d: line longer than %d bytes: %w",
				name, line+1, maxHostfileLine, ftrma.ErrInvalid)
		}
		return nil, fmt.Errorf("launcher: hostfile %s: %w", name, err)
	}
	if len(t.hosts) == 0 {
		return nil, fmt.Errorf("launcher: hostfile %s: no hosts: %w", name, ftrma.ErrInvalid)
	}
	return t.result(), nil
}

// Hostfile keys, by the setting they give (PRRTE's hostfile lexer).
var (
	hostfileSlotsKeys = []string{"slots", "cpu", "count"}
	hostfileMaxKeys   = []string{
		"max_slots", "max-slots", "slots_max", "slots-max",
		"cpu_max", "cpu-max", "max_cpu", "max-cpu",
		"count_max", "count-max", "max_count", "max-count",
	}
)

// addHostfileLine adds one hostfile line to t. Its errors do not name the
// file or line; ParseHostfile adds them.
func (t *hostTally) addHostfileLine(text string) error {
	if i := strings.IndexByte(text, '#'); i >= 0 {
		text = text[:i]
	}
	// Spaces around '=' are allowed, as in Open MPI: split "slots=2",
	// "slots = 2" and "slots =2" alike into key, "=", value.
	tok := strings.Fields(strings.ReplaceAll(text, "=", " = "))
	if len(tok) == 0 {
		return nil
	}
	name, err := hostfileName(tok[0])
	if err != nil {
		return err
	}
	var slots, maxSlots int // 0: not given
	for rest := tok[1:]; len(rest) > 0; rest = rest[3:] {
		if len(rest) < 3 || rest[0] == "=" || rest[1] != "=" || rest[2] == "=" {
			return fmt.Errorf("%q after host %s: want key=value, such as slots=4: %w",
				strings.Join(rest, ""), name, ftrma.ErrInvalid)
		}
		key, val := rest[0], rest[2]
		var dst *int
		switch {
		case slices.Contains(hostfileSlotsKeys, key):
			dst = &slots
		case slices.Contains(hostfileMaxKeys, key):
			dst = &maxSlots
		default:
			return fmt.Errorf("host %s: unknown key %q: ftrun reads slots=N and max_slots=M (and their Open MPI synonyms): %w",
				name, key, ftrma.ErrInvalid)
		}
		if *dst != 0 {
			return fmt.Errorf("host %s: %s given twice on one line: %w", name, key, ftrma.ErrInvalid)
		}
		n, err := parseSlotCount(val, maxHostSlots)
		if err != nil {
			return fmt.Errorf("host %s: %s=%s: %w", name, key, val, err)
		}
		*dst = n
	}
	switch {
	case slots == 0 && maxSlots != 0:
		slots = maxSlots
	case slots == 0:
		slots = 1
	case maxSlots != 0 && maxSlots < slots:
		return fmt.Errorf("host %s: max_slots=%d is less than slots=%d: %w", name, maxSlots, slots, ftrma.ErrInvalid)
	}
	return t.add(name, slots, maxSlots)
}

// hostfileName checks the host name that starts a hostfile line (s is not
// empty) and removes the brackets of a bracketed IPv6 address.
func hostfileName(s string) (string, error) {
	if s[0] == '^' || s[0] == '+' {
		return "", checkHostName(s) // Open MPI's exclusions and relative nodes
	}
	if inner, ok := strings.CutPrefix(s, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok || !isIPv6(inner) {
			return "", fmt.Errorf("host %q: only an IPv6 address goes in brackets: %w", s, ftrma.ErrInvalid)
		}
		return inner, nil
	}
	if before, after, ok := strings.Cut(s, ":"); ok && !strings.Contains(after, ":") {
		return "", fmt.Errorf("host %q: a hostfile gives slots as \"%s slots=%s\", not as in -H: %w",
			s, before, after, ftrma.ErrInvalid)
	}
	return s, checkHostName(s)
}

// ParseHostList parses the value of mpirun's -H/--host option: hosts
// separated by commas, each one of
//
//	NAME          one slot
//	NAME:N        N slots
//	[IPV6]        one slot
//	[IPV6]:N      N slots
//
// such as "a:4,b:4", "a,a,b", "[fe80::1]:2" or "198.18.0.5:3". NAME is a host
// name or IPv4 address as in ParseHostfile; N is a decimal integer from 1 to
// 1048576; an IPv6 address needs its brackets, even without :N. Spaces
// around an entry are ignored; an empty entry is an error. A host named more
// than once gets the sum of its mentions' slots, as in Open MPI ("a,a,b"
// gives a two slots). The hosts come back in the order of their first
// mention, with no max_slots (MaxSlots 0).
//
// Errors wrap ftrma.ErrInvalid and quote the offending entry.
func ParseHostList(s string) ([]HostSlots, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("launcher: -H: empty host list: %w", ftrma.ErrInvalid)
	}
	var t hostTally
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		name, slots, err := parseHostListEntry(e)
		if err == nil {
			err = t.add(name, slots, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("launcher: -H entry %q: %w", e, err)
		}
	}
	return t.result(), nil
}

// parseHostListEntry parses one entry of a -H list.
func parseHostListEntry(e string) (name string, slots int, err error) {
	if e == "" {
		return "", 0, fmt.Errorf("empty entry (two commas in a row, or one at an end): %w", ftrma.ErrInvalid)
	}
	count, hasCount := "", false
	if inner, ok := strings.CutPrefix(e, "["); ok {
		addr, rest, ok := strings.Cut(inner, "]")
		if !ok {
			return "", 0, fmt.Errorf("'[' without ']': %w", ftrma.ErrInvalid)
		}
		if !isIPv6(addr) {
			return "", 0, fmt.Errorf("only an IPv6 address goes in brackets: %w", ftrma.ErrInvalid)
		}
		if rest != "" {
			if count, hasCount = strings.CutPrefix(rest, ":"); !hasCount {
				return "", 0, fmt.Errorf("%q after ']': want [ADDRESS]:N: %w", rest, ftrma.ErrInvalid)
			}
		}
		name = addr
	} else {
		if strings.Count(e, ":") > 1 {
			return "", 0, fmt.Errorf("an IPv6 address needs brackets, as in [fe80::1]:2: %w", ftrma.ErrInvalid)
		}
		name, count, hasCount = strings.Cut(e, ":")
	}
	if err := checkHostName(name); err != nil {
		return "", 0, err
	}
	slots = 1
	if hasCount {
		if slots, err = parseSlotCount(count, maxHostSlots); err != nil {
			return "", 0, fmt.Errorf("slot count: %w", err)
		}
	}
	return name, slots, nil
}

// hostTally adds up the mentions of hosts, keeping the order of first
// mention.
type hostTally struct {
	hosts []tallied
	index map[string]int // host name -> its index in hosts
}

type tallied struct {
	name   string
	slots  int  // sum over the mentions
	limit  int  // sum over the mentions of max_slots, or of slots where none
	capped bool // some mention gave max_slots
}

// add adds a mention of host name with slots slots and max_slots maxSlots
// (0: not given).
func (t *hostTally) add(name string, slots, maxSlots int) error {
	i, ok := t.index[name]
	if !ok {
		if t.index == nil {
			t.index = make(map[string]int)
		}
		i = len(t.hosts)
		t.index[name] = i
		t.hosts = append(t.hosts, tallied{name: name})
	}
	h := &t.hosts[i]
	h.slots += slots
	if maxSlots != 0 {
		h.capped = true
		h.limit += maxSlots
	} else {
		h.limit += slots
	}
	if h.slots > maxHostSlots || h.limit > maxHostSlots {
		return fmt.Errorf("host %s: more than %d slots in all: %w", name, maxHostSlots, ftrma.ErrInvalid)
	}
	return nil
}

func (t *hostTally) result() []HostSlots {
	out := make([]HostSlots, len(t.hosts))
	for i, h := range t.hosts {
		out[i] = HostSlots{Name: h.name, Slots: h.slots}
		if h.capped {
			out[i].MaxSlots = h.limit
		}
	}
	return out
}

// checkHostName accepts an IP address (an IPv6 zone being an interface
// name), or a host name of at most 255 bytes that starts with a letter or
// digit and goes on with letters, digits, '.', '-' and '_' (the names
// PRRTE's hostfile lexer reads).
func checkHostName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty host name: %w", ftrma.ErrInvalid)
	case len(s) > maxHostNameLen:
		return fmt.Errorf("host name of %d bytes, more than %d: %w", len(s), maxHostNameLen, ftrma.ErrInvalid)
	}
	if _, ok := parseIP(s); ok {
		return nil
	}
	switch c := s[0]; {
	case c == '^' || c == '+':
		return fmt.Errorf("host %q: Open MPI's %c syntax is not supported by ftrun: %w", s, c, ftrma.ErrInvalid)
	case !isAlnum(c):
		return fmt.Errorf("host %q: a host name starts with a letter or digit: %w", s, ftrma.ErrInvalid)
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isNameByte(c) {
			if c == '@' {
				return fmt.Errorf("host %q: user@host is not supported by ftrun: %w", s, ftrma.ErrInvalid)
			}
			return fmt.Errorf("host %q: character %q is not allowed in a host name: %w", s, c, ftrma.ErrInvalid)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isNameByte(c byte) bool { return isAlnum(c) || c == '.' || c == '-' || c == '_' }

// parseIP parses an IPv4 or IPv6 address. An IPv6 zone must be an interface
// name (letters, digits, '.', '-', '_'); netip takes any text there.
func parseIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	z := a.Zone()
	for i := 0; i < len(z); i++ {
		if !isNameByte(z[i]) {
			return netip.Addr{}, false
		}
	}
	return a, true
}

// isIPv6 reports whether s is an IPv6 address, with or without a zone.
func isIPv6(s string) bool {
	a, ok := parseIP(s)
	return ok && a.Is6()
}

// parseSlotCount parses a decimal count from 1 to hi: digits only, no sign
// or spaces.
func parseSlotCount(s string, hi int) (int, error) {
	bad := s == "" || len(s) > 9
	for i := 0; i < len(s) && !bad; i++ {
		bad = s[i] < '0' || s[i] > '9'
	}
	n := 0
	if !bad {
		n, _ = strconv.Atoi(s) // at most 9 digits: cannot fail
	}
	if bad || n < 1 || n > hi {
		return 0, fmt.Errorf("%q is not a number from 1 to %d: %w", s, hi, ftrma.ErrInvalid)
	}
	return n, nil
}

// ExpandNodelist expands a Slurm hostlist expression, such as the value of
// SLURM_JOB_NODELIST, into host names.
//
// The expression is a list of patterns separated by commas or white space
// (commas inside brackets belong to the brackets). A pattern is literal text
// with any number of bracket groups; a group is a comma-separated list of
// numbers N and ranges LO-HI (LO <= HI, decimal digits only) and stands for
// each of those numbers in turn, printed with at least as many digits as LO
// (or N) is written with (zero padding kept: "gpu[01-02]" is gpu01 and
// gpu02, and "n[8-10]" is n8, n9 and n10). So "node[1-3,5]" is node1, node2, node3 and
// node5, and "a,b" and "login" name those hosts.
//
// A pattern with several groups, such as "rack[1-2]-n[1-2]", stands for
// every combination, in Slurm's order: the last group varies fastest; of the
// groups before it, the rightmost varies slowest, the one to its left next
// slowest, and so on. For two groups that is the usual order (rack1-n1,
// rack1-n2, rack2-n1, rack2-n2); for "a[1-2]b[1-2]c[1-2]" it is a1b1c1,
// a1b1c2, a2b1c1, a2b1c2, a1b2c1, ...
// Names are not deduplicated, as in Slurm.
//
// Errors, which wrap ftrma.ErrInvalid and quote the pattern: a '[' without
// ']' or the reverse, nested brackets, an empty group or item, a non-digit
// or negative number, a reversed range, Slurm's multi-dimensional "x" boxes,
// an expression with no names, more than 65536 names in all, and names that
// are not valid host names (see ParseHostfile) or longer than 255 bytes.
func ExpandNodelist(s string) ([]string, error) {
	names, err := expandNodelist(s)
	if err != nil {
		return nil, fmt.Errorf("launcher: node list %q: %w", s, err)
	}
	return names, nil
}

// expandNodelist is ExpandNodelist without the "launcher: node list" prefix
// on errors.
func expandNodelist(s string) ([]string, error) {
	pats, err := splitNodelist(s)
	if err != nil {
		return nil, err
	}
	if len(pats) == 0 {
		return nil, fmt.Errorf("no host names: %w", ftrma.ErrInvalid)
	}
	var names []string
	for _, p := range pats {
		np, err := parseNodePattern(p)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", p, err)
		}
		if np.count > maxNodelistHosts-len(names) {
			return nil, fmt.Errorf("more than %d host names: %w", maxNodelistHosts, ftrma.ErrInvalid)
		}
		if names, err = np.expand(names); err != nil {
			return nil, fmt.Errorf("%q: %w", p, err)
		}
	}
	return names, nil
}

// splitNodelist splits a Slurm hostlist expression into its patterns at the
// commas and white space outside brackets, and checks the brackets.
func splitNodelist(s string) ([]string, error) {
	var pats []string
	start, open := 0, -1 // open: index of the '[' of the group we are in
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if open >= 0 {
				return nil, fmt.Errorf("brackets inside brackets at byte %d: %w", i, ftrma.ErrInvalid)
			}
			open = i
		case ']':
			if open < 0 {
				return nil, fmt.Errorf("']' without '[' at byte %d: %w", i, ftrma.ErrInvalid)
			}
			open = -1
		case ',', ' ', '\t', '\n', '\r':
			if open >= 0 {
				continue
			}
			if i > start {
				pats = append(pats, s[start:i])
			}
			start = i + 1
		}
	}
	if open >= 0 {
		return nil, fmt.Errorf("'[' at byte %d without ']': %w", open, ftrma.ErrInvalid)
	}
	if start < len(s) {
		pats = append(pats, s[start:])
	}
	return pats, nil
}

// nodePattern is one parsed pattern of a hostlist expression: the name is
// text[0] + a value of groups[0] + text[1] + ... + text[len(groups)].
type nodePattern struct {
	text   []string
	groups [][]nodeRange
	sizes  []int // sizes[g]: how many numbers groups[g] stands for
	count  int   // the product of sizes: how many names the pattern makes
}

// nodeRange is LO-HI (or N, with lo == hi) in a bracket group, with the
// number of digits LO was written with.
type nodeRange struct {
	lo, hi uint64
	width  int
}

// parseNodePattern parses a pattern whose brackets splitNodelist checked.
func parseNodePattern(p string) (nodePattern, error) {
	np := nodePattern{count: 1}
	for {
		open := strings.IndexByte(p, '[')
		if open < 0 {
			np.text = append(np.text, p)
			return np, nil
		}
		end := open + strings.IndexByte(p[open:], ']')
		g, size, err := parseNodeGroup(p[open+1 : end])
		if err != nil {
			return np, err
		}
		if size > maxNodelistHosts/np.count {
			return np, fmt.Errorf("more than %d host names: %w", maxNodelistHosts, ftrma.ErrInvalid)
		}
		np.text = append(np.text, p[:open])
		np.groups = append(np.groups, g)
		np.sizes = append(np.sizes, size)
		np.count *= size
		p = p[end+1:]
	}
}

// parseNodeGroup parses the inside of one bracket group.
func parseNodeGroup(s string) (g []nodeRange, size int, err error) {
	for _, item := range strings.Split(s, ",") {
		loS, hiS, isRange := strings.Cut(item, "-")
		lo, err := parseNodeNumber(loS, item)
		if err != nil {
			return nil, 0, err
		}
		hi := lo
		if isRange {
			if hi, err = parseNodeNumber(hiS, item); err != nil {
				return nil, 0, err
			}
			if hi < lo {
				return nil, 0, fmt.Errorf("reversed range [%s]: %w", item, ftrma.ErrInvalid)
			}
		}
		if hi-lo >= maxNodelistHosts || int(hi-lo+1) > maxNodelistHosts-size {
			return nil, 0, fmt.Errorf("more than %d host names: %w", maxNodelistHosts, ftrma.ErrInvalid)
		}
		size += int(hi - lo + 1)
		g = append(g, nodeRange{lo: lo, hi: hi, width: len(loS)})
	}
	return g, size, nil
}

// parseNodeNumber parses one bound of a range item: 1 to 18 decimal digits.
func parseNodeNumber(s, item string) (uint64, error) {
	bad := s == "" || len(s) > 18
	for i := 0; i < len(s) && !bad; i++ {
		bad = s[i] < '0' || s[i] > '9'
	}
	if bad {
		return 0, fmt.Errorf("[%s]: want N or LO-HI, 1 to 18 decimal digits each: %w", item, ftrma.ErrInvalid)
	}
	n, _ := strconv.ParseUint(s, 10, 64) // at most 18 digits: cannot fail
	return n, nil
}

// expand appends the pattern's names to names, in Slurm's order.
func (np nodePattern) expand(names []string) ([]string, error) {
	k := len(np.groups)
	// Slurm's loops, outermost first: groups k-2, k-3, ..., 0, then k-1.
	var order []int
	for g := k - 2; g >= 0; g-- {
		order = append(order, g)
	}
	if k > 0 {
		order = append(order, k-1)
	}
	vals := make([][]string, k)
	for g, rs := range np.groups {
		vals[g] = make([]string, 0, np.sizes[g])
		for _, r := range rs {
			for v := r.lo; ; v++ {
				vals[g] = append(vals[g], fmt.Sprintf("%0*d", r.width, v))
				if v == r.hi {
					break
				}
			}
		}
	}
	at := make([]int, k) // at[g]: the index into vals[g] of the current name
	var b strings.Builder
	for {
		b.Reset()
		for g := range k {
			b.WriteString(np.text[g])
			b.WriteString(vals[g][at[g]])
		}
		b.WriteString(np.text[k])
		name := b.String()
		if err := checkHostName(name); err != nil {
			return names, err
		}
		names = append(names, name)
		j := len(order) - 1
		for ; j >= 0; j-- {
			g := order[j]
			if at[g]++; at[g] < len(vals[g]) {
				break
			}
			at[g] = 0
		}
		if j < 0 {
			return names, nil
		}
	}
}

// ParseTasksPerNode parses a Slurm per-node count list, the format of
// SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE: counts separated by
// commas, each N or N(xR) for R nodes in a row with count N, as in
// "2(x3),1" for [2 2 2 1]. N and R are decimal integers >= 1. The list must
// give exactly nodes counts (nodes >= 1), one per node of the node list, in
// its order. Errors wrap ftrma.ErrInvalid.
func ParseTasksPerNode(s string, nodes int) ([]int, error) {
	counts, err := parseTasksPerNode(s, nodes)
	if err != nil {
		return nil, fmt.Errorf("launcher: per-node counts %q: %w", s, err)
	}
	return counts, nil
}

func parseTasksPerNode(s string, nodes int) ([]int, error) {
	if nodes < 1 || nodes > maxNodelistHosts {
		return nil, fmt.Errorf("%d nodes, want 1 to %d: %w", nodes, maxNodelistHosts, ftrma.ErrInvalid)
	}
	var counts []int
	for _, item := range strings.Split(s, ",") {
		n, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			r, okx := strings.CutPrefix(item[i:], "(x")
			r, okp := strings.CutSuffix(r, ")")
			if !okx || !okp {
				return nil, fmt.Errorf("%q: want N or N(xR): %w", item, ftrma.ErrInvalid)
			}
			n, rep = item[:i], r
		}
		c, err := parseSlotCount(n, maxHostSlots)
		if err != nil {
			return nil, fmt.Errorf("%q: count: %w", item, err)
		}
		left := nodes - len(counts)
		if left == 0 {
			return nil, fmt.Errorf("more counts than the %d nodes: %w", nodes, ftrma.ErrInvalid)
		}
		r, err := parseSlotCount(rep, left)
		if err != nil {
			return nil, fmt.Errorf("%q: repetition (%d nodes left of %d): %w", item, left, nodes, err)
		}
		for range r {
			counts = append(counts, c)
		}
	}
	if len(counts) != nodes {
		return nil, fmt.Errorf("%d counts for %d nodes: %w", len(counts), nodes, ftrma.ErrInvalid)
	}
	return counts, nil
}

// SlurmHosts returns the hosts of the Slurm allocation the process runs in,
// read with getenv (os.Getenv, or a fake in tests).
//
// The hosts are the names of SLURM_JOB_NODELIST (or, if that is unset or
// empty, SLURM_NODELIST), expanded by ExpandNodelist, in its order. Each
// host's slots are its count in SLURM_TASKS_PER_NODE; if that is unset, in
// SLURM_JOB_CPUS_PER_NODE (Open MPI's choice); if both are, 1. Counts are
// parsed by ParseTasksPerNode. MaxSlots is 0: Slurm gives no hard cap.
//
// ok is false, with a nil error, when the process is not in an allocation:
// SLURM_JOB_ID is unset or empty, or there is no node list. When it is in
// one but a variable does not parse, ok is true and err, which wraps
// ftrma.ErrInvalid, names the variable.
func SlurmHosts(getenv func(string) string) (hosts []HostSlots, ok bool, err error) {
	if getenv("SLURM_JOB_ID") == "" {
		return nil, false, nil
	}
	listVar := "SLURM_JOB_NODELIST"
	list := getenv(listVar)
	if list == "" {
		listVar = "SLURM_NODELIST"
		list = getenv(listVar)
	}
	if list == "" {
		return nil, false, nil
	}
	names, err := expandNodelist(list)
	if err != nil {
		return nil, true, fmt.Errorf("launcher: Slurm allocation: %s=%q: %w", listVar, list, err)
	}
	counts := make([]int, len(names))
	for i := range counts {
		counts[i] = 1
	}
	for _, v := range []string{"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"} {
		if s := getenv(v); s != "" {
			if counts, err = parseTasksPerNode(s, len(names)); err != nil {
				return nil, true, fmt.Errorf("launcher: Slurm allocation: %s=%q for the %d nodes of %s: %w",
					v, s, len(names), listVar, err)
			}
			break
		}
	}
	hosts = make([]HostSlots, len(names))
	for i, name := range names {
		hosts[i] = HostSlots{Name: name, Slots: counts[i]}
	}
	return hosts, true, nil
}

// MapRanks places n ranks on hosts, as mpirun --map-by does, and returns,
// per host in the order of hosts, the ranks placed there (nil for a host
// that gets none), and the number of ranks placed.
//
// n == 0 means one rank per slot (mpirun without -n, inside an allocation
// or with a hostfile); n must not be negative or above 1048576.
//
// by is "slot" (or "", Open MPI's default) or "node", in any case:
//
//   - slot fills the first host's slots with ranks 0, 1, ..., then the next
//     host's, and so on: each host's ranks are consecutive.
//   - node deals ranks out round-robin, one per host per round, in host
//     order, skipping hosts whose slots are full.
//
// When n is more than the slots of all hosts, MapRanks fails in Open MPI's
// words ("there are not enough slots available ...") unless oversubscribe.
// With oversubscribe, every slot is filled first, and then:
//
//   - node goes on dealing one more rank per host per round from the first
//     host, skipping hosts at their MaxSlots (Open MPI's documented rule);
//   - slot shares the extra ranks among the hosts in proportion to their
//     Slots (largest remainder; ties to the earlier host), a host at its
//     MaxSlots leaving its share to the others, and keeps each host's ranks
//     consecutive. (PRRTE shares them evenly instead, which loads a small
//     host as much as a big one.)
//
// No host ever gets more than its MaxSlots; if the MaxSlots of the hosts
// cannot hold n ranks, that is an error too. Each host must have a
// non-empty Name, Slots >= 1 and MaxSlots 0 or >= Slots, neither above
// 1048576. Errors wrap ftrma.ErrInvalid.
func MapRanks(hosts []HostSlots, n int, by string, oversubscribe bool) (ranks [][]ftrma.Rank, used int, err error) {
	if len(hosts) == 0 {
		return nil, 0, fmt.Errorf("launcher: no hosts to place ranks on: %w", ftrma.ErrInvalid)
	}
	total, capTotal, allCapped := 0, 0, true
	for _, h := range hosts {
		switch {
		case h.Name == "":
			return nil, 0, fmt.Errorf("launcher: a host without a name: %w", ftrma.ErrInvalid)
		case h.Slots < 1 || h.Slots > maxHostSlots:
			return nil, 0, fmt.Errorf("launcher: host %s: %d slots, want 1 to %d: %w", h.Name, h.Slots, maxHostSlots, ftrma.ErrInvalid)
		case h.MaxSlots != 0 && (h.MaxSlots < h.Slots || h.MaxSlots > maxHostSlots):
			return nil, 0, fmt.Errorf("launcher: host %s: max_slots %d, want 0 or %d to %d: %w",
				h.Name, h.MaxSlots, h.Slots, maxHostSlots, ftrma.ErrInvalid)
		}
		total += h.Slots
		if h.MaxSlots == 0 {
			allCapped = false
		} else {
			capTotal += h.MaxSlots
		}
	}
	var byNode bool
	switch strings.ToLower(by) {
	case "", "slot":
	case "node":
		byNode = true
	default:
		return nil, 0, fmt.Errorf("launcher: --map-by %q: want slot or node: %w", by, ftrma.ErrInvalid)
	}
	if n == 0 {
		n = total
	}
	if n < 0 || n > maxPlacedRanks {
		return nil, 0, fmt.Errorf("launcher: %d ranks, want 0 (one per slot) to %d: %w", n, maxPlacedRanks, ftrma.ErrInvalid)
	}
	if n > total {
		if !oversubscribe {
			return nil, 0, fmt.Errorf("launcher: there are not enough slots available: %d ranks asked for, %s on %s; "+
				"use --oversubscribe to run more ranks than slots, or ask for fewer ranks: %w",
				n, plural(total, "slot"), plural(len(hosts), "host"), ftrma.ErrInvalid)
		}
		if allCapped && n > capTotal {
			return nil, 0, fmt.Errorf("launcher: %d ranks asked for, but the max_slots of the %s allow only %d: %w",
				n, plural(len(hosts), "host"), capTotal, ftrma.ErrInvalid)
		}
	}
	if byNode {
		ranks = mapByNode(hosts, n)
	} else {
		ranks = mapBySlot(hosts, n, total)
	}
	return ranks, n, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// mapBySlot is MapRanks by slot, for hosts and n that MapRanks checked.
func mapBySlot(hosts []HostSlots, n, total int) [][]ftrma.Rank {
	var counts []int
	if n <= total {
		counts = make([]int, len(hosts))
		left := n
		for i, h := range hosts {
			counts[i] = min(h.Slots, left)
			left -= counts[i]
		}
	} else {
		counts = shareByWeight(hosts, n, total)
	}
	ranks := make([][]ftrma.Rank, len(hosts))
	next := 0
	for i, c := range counts {
		if c == 0 {
			continue
		}
		ranks[i] = make([]ftrma.Rank, c)
		for j := range ranks[i] {
			ranks[i][j] = ftrma.Rank(next)
			next++
		}
	}
	return ranks
}

// shareByWeight returns how many of n > total ranks each host gets when
// every host takes load Slots*L for one load factor L, up to its MaxSlots.
//
// Hosts whose MaxSlots/Slots is below L take MaxSlots; they are found in
// increasing order of that ratio, since L only grows as capped hosts leave
// their excess to the rest. The other hosts share what remains in proportion
// to Slots: each takes the floor of its share, and the ranks left over go
// one each to the hosts with the largest remainders (ties to the earlier
// host). A host so below its cap is strictly below it before the +1, so it
// never passes MaxSlots; and L > 1 gives every host at least its Slots.
func shareByWeight(hosts []HostSlots, n, total int) []int {
	counts := make([]int, len(hosts))
	var capped []int
	for i, h := range hosts {
		if h.MaxSlots != 0 {
			capped = append(capped, i)
		}
	}
	slices.SortStableFunc(capped, func(a, b int) int {
		// MaxSlots[a]/Slots[a] against MaxSlots[b]/Slots[b]; each value
		// is at most 2^20, so the products fit.
		return cmp.Compare(int64(hosts[a].MaxSlots)*int64(hosts[b].Slots), int64(hosts[b].MaxSlots)*int64(hosts[a].Slots))
	})
	full := make([]bool, len(hosts))
	rest, weight := int64(n), int64(total)
	for _, i := range capped {
		h := hosts[i]
		if rest*int64(h.Slots) < int64(h.MaxSlots)*weight {
			break // L = rest/weight is below this host's ratio, and the rest's
		}
		counts[i], full[i] = h.MaxSlots, true
		rest -= int64(h.MaxSlots)
		weight -= int64(h.Slots)
	}
	if weight == 0 {
		return counts // every host is at its cap; MapRanks checked they hold n
	}
	type remainder struct {
		host int
		rem  int64
	}
	var rems []remainder
	left := rest
	for i, h := range hosts {
		if full[i] {
			continue
		}
		q := rest * int64(h.Slots)
		counts[i] = int(q / weight)
		left -= q / weight
		rems = append(rems, remainder{i, q % weight})
	}
	slices.SortStableFunc(rems, func(a, b remainder) int { return cmp.Compare(b.rem, a.rem) })
	for _, r := range rems[:left] {
		counts[r.host]++
	}
	return counts
}

// mapByNode is MapRanks by node, for hosts and n that MapRanks checked.
func mapByNode(hosts []HostSlots, n int) [][]ftrma.Rank {
	ranks := make([][]ftrma.Rank, len(hosts))
	next := 0
	// deal deals ranks round-robin over the hosts below their limit until
	// n are placed or every host is at its limit.
	deal := func(limit func(HostSlots) int) {
		var open []int
		for i, h := range hosts {
			if len(ranks[i]) < limit(h) {
				open = append(open, i)
			}
		}
		for next < n && len(open) > 0 {
			still := open[:0]
			for _, i := range open {
				if next == n {
					break
				}
				ranks[i] = append(ranks[i], ftrma.Rank(next))
				next++
				if len(ranks[i]) < limit(hosts[i]) {
					still = append(still, i)
				}
			}
			open = still
		}
	}
	deal(func(h HostSlots) int { return h.Slots })
	deal(func(h HostSlots) int {
		if h.MaxSlots == 0 {
			return maxPlacedRanks
		}
		return h.MaxSlots
	})
	return ranks
}
