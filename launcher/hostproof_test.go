package launcher

import (
	"crypto/tls"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/seclink"
)

// The nodes' addresses come from scontrol's NodeAddr, NodeHostName and
// NodeName, resolved; an address two nodes share proves neither; a node
// scontrol does not list is an error.
func TestParseNodeAddrs(t *testing.T) {
	text := "NodeName=h1 Arch=x86_64 NodeAddr=198.18.60.11 NodeHostName=h1 State=IDLE\n" +
		"NodeName=h2 NodeAddr=node2.example NodeHostName=h2 State=IDLE\n" +
		"NodeName=h3 NodeAddr=198.18.60.13 NodeHostName=(null)\n" +
		"NodeName=other NodeAddr=198.18.60.99\n"
	lookup := func(name string) ([]string, error) {
		switch name {
		case "node2.example":
			return []string{"198.18.60.12", "fd00::12"}, nil
		case "h1", "h3":
			return []string{"198.18.60.50"}, nil // both: proves neither
		}
		return nil, errors.New("no such host")
	}
	got, err := parseNodeAddrs(text, []string{"h1", "h2", "h3"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"198.18.60.11": "h1", "198.18.60.12": "h2", "fd00::12": "h2", "198.18.60.13": "h3"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for a, n := range want {
		if got[a] != n {
			t.Errorf("%s: %q, want %q (all: %v)", a, got[a], n, got)
		}
	}
	if _, err := parseNodeAddrs(text, []string{"h1", "h9"}, lookup); err == nil || !strings.Contains(err.Error(), "h9") {
		t.Errorf("a node scontrol does not list: %v", err)
	}
}

// proofHost names the node an origin address is of, and says what to do
// when munged seals with a loopback or unknown address.
func TestProofHost(t *testing.T) {
	addrs := map[string]string{"198.18.60.11": "h1"}
	if n, err := proofHost("198.18.60.11", addrs); err != nil || n != "h1" {
		t.Errorf("proofHost: %q, %v", n, err)
	}
	for origin, phrase := range map[string]string{
		"127.0.1.1": "--origin", "0.0.0.0": "--origin", "": "--origin", "198.18.60.77": "no node of the step",
	} {
		if _, err := proofHost(origin, addrs); err == nil || !strings.Contains(err.Error(), phrase) {
			t.Errorf("proofHost(%q): %v, want an error saying %q", origin, err, phrase)
		}
	}
}

// needMunge skips a test that seals credentials when this machine has no
// working munge.
func needMunge(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"munge", "unmunge"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("NOT RUN: no %s", tool)
		}
	}
	if err := exec.Command("sh", "-c", "munge -n | unmunge").Run(); err != nil {
		t.Skipf("NOT RUN: munge does not work here: %v", err)
	}
}

// tlsPair is both ends of one seclink session.
func tlsPair(t *testing.T) (client, server *tls.Conn) {
	t.Helper()
	a, b := net.Pipe()
	key := seclink.DeriveKey([]byte("0123456789abcdef0123456789abcdef"), "test")
	done := make(chan *tls.Conn, 1)
	go func() {
		s, err := seclink.Server(b, key, time.Now().Add(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	c, err := seclink.Client(a, key, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s := <-done
	t.Cleanup(func() { a.Close(); b.Close() }) // the pipes: a TLS close_notify would wait for a reader
	return c, s
}

// A proof opens on the other end of its own link, for its job and kind,
// and names the host it was sealed on; on another link (relayed), for
// another job or of the other kind it is refused.
func TestHostProofBoundToItsLink(t *testing.T) {
	needMunge(t)
	agentEnd, ftrunEnd := tlsPair(t)
	cred, err := makeProof(proofAgentMagic, "job1", agentEnd)
	if err != nil {
		t.Fatal(err)
	}
	origin, err := checkProof(cred, proofAgentMagic, "job1", ftrunEnd)
	if err != nil || net.ParseIP(origin) == nil {
		t.Fatalf("the proof on its own link: origin %q, %v", origin, err)
	}
	for _, c := range []struct {
		what, kind, job, phrase string
		link                    *tls.Conn
	}{
		{"another link", proofAgentMagic, "job1", "another link", nil},
		{"another job", proofAgentMagic, "job2", "job", ftrunEnd},
		{"the other kind", proofFtrunMagic, "job1", "not a " + proofFtrunMagic, ftrunEnd},
	} {
		link := c.link
		if link == nil {
			_, link = tlsPair(t)
		}
		cred, err := makeProof(proofAgentMagic, "job1", agentEnd) // munge refuses a credential opened twice
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checkProof(cred, c.kind, c.job, link); err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("%s: %v, want a refusal saying %q", c.what, err, c.phrase)
		}
	}
}
