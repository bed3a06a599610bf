package launcher

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/ftrma/ftrma/launcher/internal/members"
)

// FuzzParseMembersMsg: the members message comes over the agent link.
// Parsing never panics, and what append writes parses back the same.
func FuzzParseMembersMsg(f *testing.F) {
	key := bytes.Repeat([]byte{7}, members.KeySize)
	f.Add(membersMsg{key: key, addr: "198.18.60.254:7946", name: "host h2", milli: 1000}.append(nil))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := parseMembersMsg(p)
		if err != nil {
			return
		}
		again, err := parseMembersMsg(m.append(nil))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("%+v round-trips as %+v, %v", m, again, err)
		}
	})
}

// FuzzParseSpecs: the values of --kill, --pause, --kill-host, --cut and
// --hosts come from the command line. Their parsers never panic, and what
// they accept prints (String) as a value that parses back the same.
func FuzzParseSpecs(f *testing.F) {
	for _, s := range []string{"2@1s", "3@500ms:2s", "h2@1.5s", "h2@1s:2s", "h3@1s:2s,oneway", "local:2,h2:7770:4", "1@-1s", "@", ":::"} {
		for kind := range uint8(5) {
			f.Add(kind, s)
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, s string) {
		var v, again any
		var err, err2 error
		switch kind % 5 {
		case 0:
			v, err = ParseKillSpec(s)
			if err == nil {
				again, err2 = ParseKillSpec(v.(KillSpec).String())
			}
		case 1:
			v, err = ParsePauseSpec(s)
			if err == nil {
				again, err2 = ParsePauseSpec(v.(PauseSpec).String())
			}
		case 2:
			v, err = ParseKillHostSpec(s)
			if err == nil {
				again, err2 = ParseKillHostSpec(v.(KillHostSpec).String())
			}
		case 3:
			v, err = ParseCutSpec(s)
			if err == nil {
				again, err2 = ParseCutSpec(v.(CutSpec).String())
			}
		case 4:
			hosts, herr := ParseHosts(s)
			if herr != nil {
				return
			}
			var parts []string
			for _, h := range hosts {
				parts = append(parts, h.String())
			}
			v, again, err2 = hosts, nil, nil
			again, err2 = ParseHosts(strings.Join(parts, ","))
		}
		if err != nil {
			return
		}
		if err2 != nil || !reflect.DeepEqual(v, again) {
			t.Fatalf("%q parses as %+v, which prints as a value that parses as %+v, %v", s, v, again, err2)
		}
	})
}

// FuzzParseArgs: ftrun's whole command line. ParseArgs never panics, and
// never takes long or much memory, whatever the arguments (NUL separates
// them here).
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"-n\x004\x00prog", "--hosts\x00local:2,h2:7770:2\x00-n\x004\x00prog", "-n\x002\x00--kill\x001@1s\x00--pause\x000@1s:1s\x00prog\x00a",
		"-n\x002\x00--respawn\x00--spare-hosts\x00h3\x00prog", "-H\x00h1:2,h2\x00prog", "--transport\x00shm\x00-n\x001\x00p",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		t.Setenv("SLURM_JOB_ID", "")
		o, err := ParseArgs(strings.Split(s, "\x00"))
		if err == nil && o == nil {
			t.Fatal("no options and no error")
		}
	})
}
