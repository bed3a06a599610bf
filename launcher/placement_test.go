package launcher

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ftrma/ftrma"
)

func TestParseHostfile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []HostSlots
	}{
		{
			// Open MPI 5 docs, "Scheduling with the --hostfile option"; where
			// Open MPI would count foo's cores, ftrun gives it one slot.
			"openmpi-example",
			"# This is an example hostfile.  Comments begin with #.\n" +
				"#\n" +
				"# Since no slots are specified, the number of slots defaults to the\n" +
				"# number of processor cores available on the machine.\n" +
				"foo.example.com\n" +
				"\n" +
				"# We want to allow launching a maximum of 2 processes on this host\n" +
				"# (e.g., potentially because it has two processor cores):\n" +
				"bar.example.com slots=2\n",
			[]HostSlots{{"foo.example.com", 1, 0}, {"bar.example.com", 2, 0}},
		},
		{
			// Open MPI 5 docs, "Scheduling overview" (my-hosts).
			"openmpi-max-slots",
			"node0 slots=2 max_slots=20\nnode1 slots=2 max_slots=20\n",
			[]HostSlots{{"node0", 2, 20}, {"node1", 2, 20}},
		},
		{
			"openmpi-inclusionary",
			"node01.example.com slots=1\nnode02.example.com slots=1\nnode03.example.com slots=1\n",
			[]HostSlots{{"node01.example.com", 1, 0}, {"node02.example.com", 1, 0}, {"node03.example.com", 1, 0}},
		},
		{"no-final-newline", "a slots=4", []HostSlots{{"a", 4, 0}}},
		{"repeated-lines-add", "a\na\nb\n", []HostSlots{{"a", 2, 0}, {"b", 1, 0}}},
		{"repeated-with-slots", "a slots=2\nb\na slots=3\n", []HostSlots{{"a", 5, 0}, {"b", 1, 0}}},
		{"repeated-caps-add", "a slots=2 max_slots=4\na slots=1 max_slots=3\n", []HostSlots{{"a", 3, 7}}},
		{"repeated-mixed-caps", "a slots=2 max_slots=4\na slots=2\n", []HostSlots{{"a", 4, 6}}},
		{"mixed-caps-any-order", "a slots=2\na slots=2 max_slots=4\n", []HostSlots{{"a", 4, 6}}},
		{"cpu", "a cpu=4", []HostSlots{{"a", 4, 0}}},
		{"count", "a count=4", []HostSlots{{"a", 4, 0}}},
		{"max-synonyms", "a slots=1 max-slots=2\nb slots=1 slots_max=2\nc slots=1 slots-max=2\nd slots=1 cpu_max=2\n" +
			"e slots=1 cpu-max=2\nf slots=1 max_cpu=2\ng slots=1 max-cpu=2\nh slots=1 count_max=2\n" +
			"i slots=1 count-max=2\nj slots=1 max_count=2\nk slots=1 max-count=2\n",
			[]HostSlots{{"a", 1, 2}, {"b", 1, 2}, {"c", 1, 2}, {"d", 1, 2}, {"e", 1, 2}, {"f", 1, 2},
				{"g", 1, 2}, {"h", 1, 2}, {"i", 1, 2}, {"j", 1, 2}, {"k", 1, 2}}},
		{"max-only", "a max_slots=4", []HostSlots{{"a", 4, 4}}},
		{"max-before-slots", "a max_slots=8 slots=2", []HostSlots{{"a", 2, 8}}},
		{"max-equals-slots", "a slots=3 max_slots=3", []HostSlots{{"a", 3, 3}}},
		{"spaces-around-equals", "a slots = 4\nb slots =2 max_slots= 3\n", []HostSlots{{"a", 4, 0}, {"b", 2, 3}}},
		{"trailing-comment", "a slots=2 # two cores\nb#no space\n", []HostSlots{{"a", 2, 0}, {"b", 1, 0}}},
		{"comment-after-equals", "a slots=2# x=y", []HostSlots{{"a", 2, 0}}},
		{"tabs-and-crlf", "a\tslots=2\r\n\r\n\tb  \r\n", []HostSlots{{"a", 2, 0}, {"b", 1, 0}}},
		{"ipv4", "198.18.0.5 slots=3", []HostSlots{{"198.18.0.5", 3, 0}}},
		{"ipv6-bare-and-bracketed", "fe80::1 slots=2\n[fe80::1] slots=1\n::1\n", []HostSlots{{"fe80::1", 3, 0}, {"::1", 1, 0}}},
		{"names-compared-as-written", "node1\nnode1.example.com\n", []HostSlots{{"node1", 1, 0}, {"node1.example.com", 1, 0}}},
		{"underscore-and-digits", "rack_1-node-07\n10gw\n", []HostSlots{{"rack_1-node-07", 1, 0}, {"10gw", 1, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostfile(strings.NewReader(tc.in), "hosts.txt")
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseHostfile(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseHostfileRejects(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"", "hosts.txt: no hosts"},
		{"# only a comment\n\n", "hosts.txt: no hosts"},
		{"a slots=0", "hosts.txt:1: host a: slots=0: \"0\" is not a number from 1 to"},
		{"a\nb slots=x", "hosts.txt:2: host b: slots=x"},
		{"a\n\nb slots=-1", "hosts.txt:3: "},
		{"a slots=+1", "not a number"},
		{"a slots=1.5", "not a number"},
		{"a slots=99999999999", "not a number"},
		{"a slots=1048577", "not a number from 1 to 1048576"},
		{"a slots=1048576\na slots=1", "more than 1048576 slots in all"},
		{"a slots", "hosts.txt:1: \"slots\" after host a: want key=value"},
		{"a slots=", "want key=value"},
		{"a =4", "\"=4\" after host a: want key=value"},
		{"a slots=2=3", "want key=value"},
		{"a slots==2", "want key=value"},
		{"a 4", "want key=value"},
		{"a slots=2 slots=3", "host a: slots given twice"},
		{"a slots=2 cpu=3", "host a: cpu given twice"},
		{"a max_slots=2 max-slots=3", "given twice"},
		{"a slots=4 max_slots=2", "host a: max_slots=2 is less than slots=4"},
		{"a port=22", "host a: unknown key \"port\""},
		{"a username=me", "unknown key \"username\""},
		{"a Slots=2", "unknown key \"Slots\""},
		{"a slot=2", "unknown key \"slot\""},
		{"a:4", "host \"a:4\": a hostfile gives slots as \"a slots=4\""},
		{"198.18.0.5:3", "\"198.18.0.5 slots=3\""},
		{"user@a slots=2", "user@host is not supported"},
		{"^a", "Open MPI's ^ syntax is not supported"},
		{"+n0", "Open MPI's + syntax is not supported"},
		{"+e:2", "Open MPI's + syntax"},
		{"/* block */", "starts with a letter or digit"},
		{"// comment", "starts with a letter or digit"},
		{"-a", "starts with a letter or digit"},
		{"a/b", "character '/' is not allowed"},
		{"[a] slots=2", "only an IPv6 address goes in brackets"},
		{"[fe80::1 slots=2", "only an IPv6 address goes in brackets"},
		{"[198.18.0.5]", "only an IPv6 address goes in brackets"},
		{"0::0%00000000]", "not allowed in a host name"},
		{"fe80::1%eth0/x", "not allowed in a host name"},
		{strings.Repeat("a", 256), "host name of 256 bytes"},
		{"a\n" + strings.Repeat("b", maxHostfileLine+1), "hosts.txt:2: line longer than"},
	} {
		got, err := ParseHostfile(strings.NewReader(tc.in), "hosts.txt")
		if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseHostfile(%.40q) = %v, %v; want an invalid-argument error containing %q", tc.in, got, err, tc.msg)
		}
	}
}

func TestParseHostfileReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := ParseHostfile(iotest.ErrReader(boom), "hosts.txt")
	if !errors.Is(err, boom) || errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "hostfile hosts.txt") {
		t.Errorf("ParseHostfile(failing reader) = %v; want the reader's error, naming the file", err)
	}
}

func TestParseHostList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []HostSlots
	}{
		{"a:4,b:4", []HostSlots{{"a", 4, 0}, {"b", 4, 0}}},
		{"a,a,b", []HostSlots{{"a", 2, 0}, {"b", 1, 0}}},
		{"[fe80::1]:2", []HostSlots{{"fe80::1", 2, 0}}},
		{"198.18.0.5:3", []HostSlots{{"198.18.0.5", 3, 0}}},
		{"login", []HostSlots{{"login", 1, 0}}},
		// Open MPI 5 docs, "Scheduling with the --host option" and "Calculating
		// the number of slots".
		{"a,b,c", []HostSlots{{"a", 1, 0}, {"b", 1, 0}, {"c", 1, 0}}},
		{"a,b:2,c:3", []HostSlots{{"a", 1, 0}, {"b", 2, 0}, {"c", 3, 0}}},
		{"node01.example.com:2,node01.example.com", []HostSlots{{"node01.example.com", 3, 0}}},
		{"b:2,a,b", []HostSlots{{"b", 3, 0}, {"a", 1, 0}}},
		{"[::1],[::1]:3,[fe80::1%eth0]:2", []HostSlots{{"::1", 4, 0}, {"fe80::1%eth0", 2, 0}}},
		{" a , b:2 ", []HostSlots{{"a", 1, 0}, {"b", 2, 0}}},
	} {
		got, err := ParseHostList(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHostList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for in, msg := range map[string]string{
		"":                  "empty host list",
		"  ":                "empty host list",
		"a,,b":              `-H entry "": empty entry`,
		"a,":                "empty entry",
		",a":                "empty entry",
		"a:":                `-H entry "a:": slot count: "" is not a number`,
		"a:0":               `slot count: "0" is not a number from 1 to 1048576`,
		"a:x":               `slot count: "x"`,
		"a:-1":              "not a number",
		"a:2000000":         "not a number from 1 to 1048576",
		"a:1048576,a:1":     "more than 1048576 slots in all",
		":4":                "empty host name",
		"fe80::1":           "an IPv6 address needs brackets",
		"fe80::1:2":         "an IPv6 address needs brackets",
		"a:1:2":             "needs brackets",
		"[fe80::1":          "'[' without ']'",
		"[a]:2":             "only an IPv6 address goes in brackets",
		"[198.18.0.5]:2":    "only an IPv6 address goes in brackets",
		"[fe80::1]2":        `"2" after ']'`,
		"[fe80::1]:":        "slot count",
		"a b":               "character ' ' is not allowed",
		"me@a:2":            "user@host is not supported",
		"^a":                "Open MPI's ^ syntax",
		"node[1-2]":         "character '[' is not allowed",
		"a\tb:2":            "not allowed",
		"[fe80::1]:2:3":     "slot count",
		"[fe80::1%a;b]:2":   "only an IPv6 address goes in brackets",
		"host.example.com:": "slot count",
	} {
		got, err := ParseHostList(in)
		if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseHostList(%q) = %v, %v; want an invalid-argument error containing %q", in, got, err, msg)
		}
	}
}

func TestExpandNodelist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"node[1-3,5]", []string{"node1", "node2", "node3", "node5"}},
		{"gpu[01-02]", []string{"gpu01", "gpu02"}},
		{"a,b", []string{"a", "b"}},
		{"login", []string{"login"}},
		{"rack[1-2]-n[1-2]", []string{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
		// Slurm's nesting for three groups: the middle one outermost.
		{"a[1-2]b[1-2]c[1-2]", []string{
			"a1b1c1", "a1b1c2", "a2b1c1", "a2b1c2",
			"a1b2c1", "a1b2c2", "a2b2c1", "a2b2c2",
		}},
		{"a[1-2]b[3]c[5-6]d[8]", []string{ // loops: c, b, a, d
			"a1b3c5d8", "a2b3c5d8", "a1b3c6d8", "a2b3c6d8",
		}},
		// Slurm docs and man pages: Slurm::Hostlist, slurm_hostlist_create(3),
		// sbatch(1) -w.
		{"tux[0-5,12,20-25]", []string{
			"tux0", "tux1", "tux2", "tux3", "tux4", "tux5", "tux12",
			"tux20", "tux21", "tux22", "tux23", "tux24", "tux25",
		}},
		{"node1,node[2-5,12]", []string{"node1", "node2", "node3", "node4", "node5", "node12"}},
		{"linux[1-3,6]", []string{"linux1", "linux2", "linux3", "linux6"}},
		{"host[1-5,7]", []string{"host1", "host2", "host3", "host4", "host5", "host7"}},
		{"gnode[10,20,25,37]", []string{"gnode10", "gnode20", "gnode25", "gnode37"}},
		{"node[8-10]", []string{"node8", "node9", "node10"}},
		{"node[08-10]", []string{"node08", "node09", "node10"}},
		{"node[098-101]", []string{"node098", "node099", "node100", "node101"}},
		{"n[007]", []string{"n007"}},
		{"n[9-9]", []string{"n9"}},
		{"n[1-2]-ib", []string{"n1-ib", "n2-ib"}},
		{"n[1-2].cluster,login", []string{"n1.cluster", "n2.cluster", "login"}},
		{"[1-2]", []string{"1", "2"}},
		{"a b\tc\nd", []string{"a", "b", "c", "d"}},
		{" a,,b, ", []string{"a", "b"}},
		{"a,a", []string{"a", "a"}},
		{"n[2,1,2]", []string{"n2", "n1", "n2"}},
		{"10.0.0.[1-2]", []string{"10.0.0.1", "10.0.0.2"}},
	} {
		got, err := ExpandNodelist(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ExpandNodelist(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	got, err := ExpandNodelist("n[0-65535]")
	if err != nil || len(got) != maxNodelistHosts || got[0] != "n0" || got[65535] != "n65535" {
		t.Errorf("ExpandNodelist(n[0-65535]) = %d names, %v; want 65536", len(got), err)
	}
}

func TestExpandNodelistRejects(t *testing.T) {
	for in, msg := range map[string]string{
		"":                                  "no host names",
		" , ":                               "no host names",
		"node[1-3":                          "'[' at byte 4 without ']'",
		"node1-3]":                          "']' without '['",
		"node[[1]]":                         "brackets inside brackets",
		"node[1]]":                          "']' without '['",
		"node[3-1]":                         "reversed range [3-1]",
		"node[]":                            `"node[]": []: want N or LO-HI`,
		"node[1,,2]":                        "want N or LO-HI",
		"node[1,]":                          "want N or LO-HI",
		"node[a-b]":                         "[a-b]: want N or LO-HI",
		"node[-1]":                          "want N or LO-HI",
		"node[1-]":                          "want N or LO-HI",
		"node[1-2-3]":                       "want N or LO-HI",
		"node[1x2]":                         "want N or LO-HI",
		"node[123x456]":                     "want N or LO-HI",
		"node[ 1]":                          "want N or LO-HI",
		"node[1 -2]":                        "want N or LO-HI",
		"node[1234567890123456789]":         "1 to 18 decimal digits",
		"node[0-65536]":                     "more than 65536 host names",
		"node[0-999999999999]":              "more than 65536 host names",
		"a[0-300]b[0-300]":                  "more than 65536 host names",
		"n[0-40000],m[0-40000]":             "more than 65536 host names",
		"n[0-1,0-65535]":                    "more than 65536 host names",
		"-node[1-2]":                        "starts with a letter or digit",
		"node@[1-2]":                        "user@host",
		"^node[1-2]":                        "Open MPI's ^ syntax",
		"node/[1-2]":                        "'/' is not allowed",
		strings.Repeat("n", 255) + "[8-10]": "host name of 256 bytes",
	} {
		got, err := ExpandNodelist(in)
		if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "launcher: node list") {
			t.Errorf("ExpandNodelist(%.40q) = %.40q, %v; want an invalid-argument error containing %q", in, got, err, msg)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	for _, tc := range []struct {
		in    string
		nodes int
		want  []int
	}{
		{"2(x3),1", 4, []int{2, 2, 2, 1}}, // sbatch(1), SLURM_TASKS_PER_NODE
		{"1(x4)", 4, []int{1, 1, 1, 1}},
		{"4(x4)", 4, []int{4, 4, 4, 4}},
		{"16(x2)", 2, []int{16, 16}},
		{"16", 1, []int{16}},
		{"72(x2),36", 3, []int{72, 72, 36}},
		{"1,2,3", 3, []int{1, 2, 3}},
		{"3(x1),2(x2)", 3, []int{3, 2, 2}},
	} {
		got, err := ParseTasksPerNode(tc.in, tc.nodes)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseTasksPerNode(%q, %d) = %v, %v; want %v", tc.in, tc.nodes, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in    string
		nodes int
		msg   string
	}{
		{"2(x3),1", 3, "more counts than the 3 nodes"},
		{"2(x4)", 3, `"2(x4)": repetition (3 nodes left of 3): "4" is not a number from 1 to 3`},
		{"2(x3)", 4, "3 counts for 4 nodes"},
		{"1,1", 3, "2 counts for 3 nodes"},
		{"0", 1, `"0": count`},
		{"2(x0)", 1, "repetition"},
		{"2(3)", 3, "want N or N(xR)"},
		{"2(x3", 3, "want N or N(xR)"},
		{"2x3)", 3, "count"},
		{"2(x3)x", 3, "want N or N(xR)"},
		{"(x3)", 3, "count"},
		{"", 1, "count"},
		{"a", 1, "count"},
		{"-1", 1, "count"},
		{" 1", 1, "count"},
		{"1,", 2, "count"},
		{"1(x99999999999)", 3, "repetition"},
		{"1", 0, "0 nodes"},
		{"1", -1, "-1 nodes"},
		{"1", 1 << 40, "nodes, want 1 to 65536"},
	} {
		got, err := ParseTasksPerNode(tc.in, tc.nodes)
		if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseTasksPerNode(%q, %d) = %v, %v; want an invalid-argument error containing %q", tc.in, tc.nodes, got, err, tc.msg)
		}
	}
}

// placementEnv is a fake getenv.
func placementEnv(kv ...string) func(string) string {
	m := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestSlurmHosts(t *testing.T) {
	gnodes := func(slots int) []HostSlots {
		return []HostSlots{{"gnode10", slots, 0}, {"gnode20", slots, 0}, {"gnode25", slots, 0}, {"gnode37", slots, 0}}
	}
	for _, tc := range []struct {
		name   string
		getenv func(string) string
		want   []HostSlots
		ok     bool
	}{
		{"no-allocation", placementEnv(), nil, false},
		{"no-job-id", placementEnv("SLURM_JOB_NODELIST", "n[1-2]", "SLURM_TASKS_PER_NODE", "1(x2)"), nil, false},
		{"no-node-list", placementEnv("SLURM_JOB_ID", "7"), nil, false},
		{
			// An sbatch job's environment (4 nodes, one task each, 4 CPUs each).
			"sbatch",
			placementEnv("SLURM_JOB_ID", "200505", "SLURM_JOBID", "200505",
				"SLURM_JOB_NODELIST", "gnode[10,20,25,37]", "SLURM_NODELIST", "gnode[10,20,25,37]",
				"SLURM_TASKS_PER_NODE", "1(x4)", "SLURM_JOB_CPUS_PER_NODE", "4(x4)", "SLURM_NNODES", "4"),
			gnodes(1), true,
		},
		{"old-nodelist-name", placementEnv("SLURM_JOB_ID", "1", "SLURM_NODELIST", "gnode[10,20,25,37]", "SLURM_TASKS_PER_NODE", "2(x4)"), gnodes(2), true},
		{"cpus-when-no-tasks", placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "gnode[10,20,25,37]", "SLURM_JOB_CPUS_PER_NODE", "4(x4)"), gnodes(4), true},
		{"one-per-node", placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "gnode[10,20,25,37]"), gnodes(1), true},
		{
			"uneven",
			placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "n[1-3],login", "SLURM_TASKS_PER_NODE", "2(x3),1"),
			[]HostSlots{{"n1", 2, 0}, {"n2", 2, 0}, {"n3", 2, 0}, {"login", 1, 0}}, true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := SlurmHosts(tc.getenv)
			if err != nil || ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("SlurmHosts = %v, %v, %v; want %v, %v, nil", got, ok, err, tc.want, tc.ok)
			}
		})
	}
	for _, tc := range []struct {
		getenv func(string) string
		msg    string
	}{
		{placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "n[1-"), "SLURM_JOB_NODELIST=\"n[1-\""},
		{placementEnv("SLURM_JOB_ID", "1", "SLURM_NODELIST", "n[2-1]"), "SLURM_NODELIST=\"n[2-1]\": \"n[2-1]\": reversed range"},
		{placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "n[1-3]", "SLURM_TASKS_PER_NODE", "2(x2)"),
			"SLURM_TASKS_PER_NODE=\"2(x2)\" for the 3 nodes of SLURM_JOB_NODELIST: 2 counts for 3 nodes"},
		{placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "n[1-3]", "SLURM_JOB_CPUS_PER_NODE", "x"), "SLURM_JOB_CPUS_PER_NODE"},
		{placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", "n1", "SLURM_TASKS_PER_NODE", "0", "SLURM_JOB_CPUS_PER_NODE", "4"), "SLURM_TASKS_PER_NODE"},
	} {
		got, ok, err := SlurmHosts(tc.getenv)
		if !ok || !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("SlurmHosts = %v, %v, %v; want ok and an invalid-argument error containing %q", got, ok, err, tc.msg)
		}
	}
}

// ranksOf is a shorthand for a host's ranks in MapRanks tests.
func ranksOf(rs ...int) []ftrma.Rank {
	out := make([]ftrma.Rank, len(rs))
	for i, r := range rs {
		out[i] = ftrma.Rank(r)
	}
	return out
}

// ranksFrom returns ranks lo..lo+n-1.
func ranksFrom(lo, n int) []ftrma.Rank {
	out := make([]ftrma.Rank, n)
	for i := range out {
		out[i] = ftrma.Rank(lo + i)
	}
	return out
}

func TestMapRanks(t *testing.T) {
	node01 := []HostSlots{{"node0", 2, 20}, {"node1", 2, 20}} // Open MPI's my-hosts
	for _, tc := range []struct {
		name  string
		hosts []HostSlots
		n     int
		by    string
		over  bool
		want  [][]ftrma.Rank
		used  int
	}{
		// Open MPI 5 docs, "Scheduling overview": mpirun --hostfile my-hosts
		// -n 8 --map-by node. (The docs run it without :OVERSUBSCRIBE;
		// ftrun asks for --oversubscribe whenever n exceeds the slots.)
		{"openmpi-by-node", node01, 8, "node", true, [][]ftrma.Rank{ranksOf(0, 2, 4, 6), ranksOf(1, 3, 5, 7)}, 8},
		// The same by slot: PRRTE's mapper, like ftrun, keeps a host's ranks
		// consecutive (the docs' listing of 0,1,4,5 on node0 is not what
		// PRRTE does).
		{"openmpi-by-slot", node01, 8, "slot", true, [][]ftrma.Rank{ranksOf(0, 1, 2, 3), ranksOf(4, 5, 6, 7)}, 8},
		{"slot-fills-first-host", []HostSlots{{"a", 2, 0}, {"b", 2, 0}}, 3, "slot", false, [][]ftrma.Rank{ranksOf(0, 1), ranksOf(2)}, 3},
		{"default-is-slot", []HostSlots{{"a", 2, 0}, {"b", 2, 0}}, 3, "", false, [][]ftrma.Rank{ranksOf(0, 1), ranksOf(2)}, 3},
		{"case-insensitive", []HostSlots{{"a", 2, 0}, {"b", 2, 0}}, 3, "NODE", false, [][]ftrma.Rank{ranksOf(0, 2), ranksOf(1)}, 3},
		{"slot-leaves-hosts-empty", []HostSlots{{"a", 4, 0}, {"b", 4, 0}}, 2, "slot", false, [][]ftrma.Rank{ranksOf(0, 1), nil}, 2},
		{"node-round-robin", []HostSlots{{"a", 2, 0}, {"b", 2, 0}}, 3, "node", false, [][]ftrma.Rank{ranksOf(0, 2), ranksOf(1)}, 3},
		{"node-skips-full-hosts", []HostSlots{{"a", 1, 0}, {"b", 3, 0}, {"c", 2, 0}}, 6, "node", false,
			[][]ftrma.Rank{ranksOf(0), ranksOf(1, 3, 5), ranksOf(2, 4)}, 6},
		{"zero-means-all-slots", []HostSlots{{"a", 2, 0}, {"b", 3, 0}}, 0, "slot", false, [][]ftrma.Rank{ranksOf(0, 1), ranksOf(2, 3, 4)}, 5},
		{"zero-by-node", []HostSlots{{"a", 2, 0}, {"b", 3, 0}}, 0, "node", false, [][]ftrma.Rank{ranksOf(0, 2), ranksOf(1, 3, 4)}, 5},
		{"exact-fit-with-flag", []HostSlots{{"a", 2, 0}}, 2, "slot", true, [][]ftrma.Rank{ranksOf(0, 1)}, 2},
		// Oversubscribed by slot: extra ranks in proportion to Slots.
		{"slot-over-proportional", []HostSlots{{"a", 8, 0}, {"b", 2, 0}}, 20, "slot", true,
			[][]ftrma.Rank{ranksFrom(0, 16), ranksFrom(16, 4)}, 20},
		{"slot-over-even", []HostSlots{{"a", 4, 0}, {"b", 4, 0}}, 10, "slot", true, [][]ftrma.Rank{ranksFrom(0, 5), ranksFrom(5, 5)}, 10},
		{"slot-over-tie-to-earlier", []HostSlots{{"a", 3, 0}, {"b", 3, 0}}, 7, "slot", true, [][]ftrma.Rank{ranksFrom(0, 4), ranksFrom(4, 3)}, 7},
		{"slot-over-largest-remainder", []HostSlots{{"a", 1, 0}, {"b", 2, 0}}, 4, "slot", true, [][]ftrma.Rank{ranksFrom(0, 1), ranksFrom(1, 3)}, 4},
		{"slot-over-cap", []HostSlots{{"a", 2, 3}, {"b", 2, 0}}, 10, "slot", true, [][]ftrma.Rank{ranksFrom(0, 3), ranksFrom(3, 7)}, 10},
		{"slot-over-caps-cascade", []HostSlots{{"a", 1, 1}, {"b", 2, 3}, {"c", 1, 0}}, 10, "slot", true,
			[][]ftrma.Rank{ranksFrom(0, 1), ranksFrom(1, 3), ranksFrom(4, 6)}, 10},
		{"slot-over-all-capped-exact", []HostSlots{{"a", 1, 2}, {"b", 1, 3}}, 5, "slot", true, [][]ftrma.Rank{ranksFrom(0, 2), ranksFrom(2, 3)}, 5},
		{"single-host-over", []HostSlots{{"localhost", 2, 0}}, 4, "slot", true, [][]ftrma.Rank{ranksOf(0, 1, 2, 3)}, 4},
		// Oversubscribed by node: more rounds, skipping hosts at MaxSlots.
		{"node-over", []HostSlots{{"a", 1, 2}, {"b", 1, 0}}, 5, "node", true, [][]ftrma.Rank{ranksOf(0, 2), ranksOf(1, 3, 4)}, 5},
		{"node-over-uneven", []HostSlots{{"a", 2, 0}, {"b", 1, 0}}, 5, "node", true, [][]ftrma.Rank{ranksOf(0, 2, 3), ranksOf(1, 4)}, 5},
		{"node-over-all-capped-exact", []HostSlots{{"a", 1, 2}, {"b", 1, 3}}, 5, "node", true, [][]ftrma.Rank{ranksOf(0, 2), ranksOf(1, 3, 4)}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, used, err := MapRanks(tc.hosts, tc.n, tc.by, tc.over)
			if err != nil || used != tc.used || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MapRanks(%v, %d, %q, %v) = %v, %d, %v; want %v, %d", tc.hosts, tc.n, tc.by, tc.over, got, used, err, tc.want, tc.used)
			}
		})
	}
}

func TestMapRanksRejects(t *testing.T) {
	ab := []HostSlots{{"a", 2, 0}, {"b", 1, 0}}
	for _, tc := range []struct {
		hosts []HostSlots
		n     int
		by    string
		over  bool
		msg   string
	}{
		{ab, 4, "slot", false, "launcher: there are not enough slots available: 4 ranks asked for, 3 slots on 2 hosts; use --oversubscribe"},
		{ab, 4, "node", false, "there are not enough slots available"},
		{[]HostSlots{{"a", 1, 0}}, 2, "slot", false, "2 ranks asked for, 1 slot on 1 host;"},
		{[]HostSlots{{"a", 1, 2}, {"b", 1, 2}}, 5, "slot", true, "5 ranks asked for, but the max_slots of the 2 hosts allow only 4"},
		{[]HostSlots{{"a", 1, 2}, {"b", 1, 2}}, 5, "node", true, "allow only 4"},
		{nil, 1, "slot", false, "no hosts"},
		{ab, -1, "slot", false, "-1 ranks"},
		{ab, maxPlacedRanks + 1, "slot", true, "ranks, want 0 (one per slot) to 1048576"},
		{ab, 1, "core", false, `--map-by "core": want slot or node`},
		{ab, 1, "ppr:2:node", false, "want slot or node"},
		{[]HostSlots{{"", 1, 0}}, 1, "slot", false, "without a name"},
		{[]HostSlots{{"a", 0, 0}}, 1, "slot", false, "host a: 0 slots"},
		{[]HostSlots{{"a", -3, 0}}, 1, "slot", false, "-3 slots"},
		{[]HostSlots{{"a", maxHostSlots + 1, 0}}, 1, "slot", false, "slots, want 1 to"},
		{[]HostSlots{{"a", 4, 2}}, 1, "slot", false, "host a: max_slots 2, want 0 or 4 to"},
		{[]HostSlots{{"a", 4, -1}}, 1, "slot", false, "max_slots -1"},
	} {
		got, used, err := MapRanks(tc.hosts, tc.n, tc.by, tc.over)
		if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("MapRanks(%v, %d, %q, %v) = %v, %d, %v; want an invalid-argument error containing %q",
				tc.hosts, tc.n, tc.by, tc.over, got, used, err, tc.msg)
		}
	}
}

// TestMapRanksInvariants checks MapRanks on random hosts against the rules
// every placement keeps: each rank 0..used-1 placed exactly once, no host
// past MaxSlots, none past Slots unless oversubscribed, every slot filled
// before any host goes past its Slots, and consecutive ranks per host by
// slot.
func TestMapRanksInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		hosts := make([]HostSlots, 1+rng.IntN(6))
		total := 0
		for i := range hosts {
			hosts[i] = HostSlots{Name: fmt.Sprintf("h%d", i), Slots: 1 + rng.IntN(5)}
			if rng.IntN(2) == 0 {
				hosts[i].MaxSlots = hosts[i].Slots + rng.IntN(4)
			}
			total += hosts[i].Slots
		}
		n := rng.IntN(3 * total)
		by := []string{"slot", "node"}[rng.IntN(2)]
		ranks, used, err := MapRanks(hosts, n, by, true)
		name := fmt.Sprintf("iter %d: MapRanks(%v, %d, %s, true)", iter, hosts, n, by)
		if err != nil {
			capTotal := 0
			for _, h := range hosts {
				if h.MaxSlots == 0 {
					t.Fatalf("%s: %v, with an uncapped host", name, err)
				}
				capTotal += h.MaxSlots
			}
			if n <= capTotal {
				t.Fatalf("%s: %v, with room for %d", name, err, capTotal)
			}
			continue
		}
		if want := cmp.Or(n, total); used != want || len(ranks) != len(hosts) {
			t.Fatalf("%s = %d ranks on %d hosts; want %d on %d", name, used, len(ranks), want, len(hosts))
		}
		var all []ftrma.Rank
		for i, rs := range ranks {
			h := hosts[i]
			if h.MaxSlots != 0 && len(rs) > h.MaxSlots {
				t.Fatalf("%s: host %d has %d ranks, max_slots %d", name, i, len(rs), h.MaxSlots)
			}
			if used <= total && len(rs) > h.Slots {
				t.Fatalf("%s: host %d has %d ranks, past its %d slots without need", name, i, len(rs), h.Slots)
			}
			if used > total && len(rs) < h.Slots {
				t.Fatalf("%s: host %d has %d ranks, below its %d slots while oversubscribed", name, i, len(rs), h.Slots)
			}
			if by == "slot" {
				for j := 1; j < len(rs); j++ {
					if rs[j] != rs[j-1]+1 {
						t.Fatalf("%s: host %d's ranks %v are not consecutive", name, i, rs)
					}
				}
			}
			all = append(all, rs...)
		}
		slices.Sort(all)
		if !reflect.DeepEqual(all, ranksFrom(0, used)) {
			t.Fatalf("%s: ranks %v; want each of 0..%d once", name, all, used-1)
		}
	}
}

func FuzzParseHostfile(f *testing.F) {
	for _, s := range []string{
		"node0 slots=2 max_slots=20\nnode1 slots=2 max_slots=20\n",
		"# comment\nfoo.example.com\n\nbar.example.com slots=2 # two\n",
		"a\na\nb cpu=3\n",
		"a max_slots=4\na slots = 2\n",
		"fe80::1 slots=2\n[fe80::1]\n198.18.0.5 count=3\n",
		"a:4\n",
		"a slots=2 slots=3\n",
		"user@a\n^b\n+n0\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostfile(strings.NewReader(s), "fuzz")
		if err != nil {
			if !errors.Is(err, ftrma.ErrInvalid) || !strings.HasPrefix(err.Error(), "launcher: hostfile fuzz") {
				t.Fatalf("ParseHostfile(%q): error %v does not wrap ErrInvalid or name the file", s, err)
			}
			return
		}
		if len(hosts) == 0 {
			t.Fatalf("ParseHostfile(%q): no hosts and no error", s)
		}
		seen := make(map[string]bool)
		total := 0
		for _, h := range hosts {
			total += h.Slots
			if h.Name == "" || seen[h.Name] || strings.ContainsAny(h.Name, " \t#=[]") {
				t.Fatalf("ParseHostfile(%q): bad or repeated name %q in %v", s, h.Name, hosts)
			}
			seen[h.Name] = true
			if h.Slots < 1 || h.Slots > maxHostSlots || (h.MaxSlots != 0 && h.MaxSlots < h.Slots) || h.MaxSlots > maxHostSlots {
				t.Fatalf("ParseHostfile(%q): host %v breaks 1 <= Slots <= MaxSlots", s, h)
			}
		}
		// What ParseHostfile returns, MapRanks accepts.
		if _, _, err := MapRanks(hosts, 0, "node", false); err != nil && total <= maxPlacedRanks {
			t.Fatalf("MapRanks(ParseHostfile(%q)): %v", s, err)
		}
	})
}

func FuzzExpandNodelist(f *testing.F) {
	for _, s := range []string{
		"node[1-3,5]", "gpu[01-02]", "a,b", "rack[1-2]-n[1-2]", "login",
		"tux[0-5,12,20-25]", "a[1-2]b[1-2]c[1-2]", "n[08-10].ib x y",
		"node[1-3", "node[3-1]", "node[[1]]", "n[0-99999]", "n[1,,2]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandNodelist(s)
		if err != nil {
			if !errors.Is(err, ftrma.ErrInvalid) {
				t.Fatalf("ExpandNodelist(%q): error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if len(names) == 0 || len(names) > maxNodelistHosts {
			t.Fatalf("ExpandNodelist(%q) = %d names", s, len(names))
		}
		for _, n := range names {
			if n == "" || len(n) > maxHostNameLen || strings.ContainsAny(n, "[], \t\n\r") {
				t.Fatalf("ExpandNodelist(%q): bad name %q", s, n)
			}
		}
		// A Slurm allocation with this node list reads back the same names.
		env := placementEnv("SLURM_JOB_ID", "1", "SLURM_JOB_NODELIST", s)
		hosts, ok, err := SlurmHosts(env)
		if err != nil || !ok || len(hosts) != len(names) {
			t.Fatalf("SlurmHosts(%q) = %d hosts, %v, %v; want %d", s, len(hosts), ok, err, len(names))
		}
	})
}
