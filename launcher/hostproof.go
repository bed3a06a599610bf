package launcher

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"

	"github.com/ftrma/ftrma/internal/jobwire"
)

// Host proofs: which host an agent started through Slurm runs on.
//
// Every agent of an srun step reads the same boot line, so the link key
// "srun" tells ftrun only that a link comes from one of the step's agents,
// not from which host; and an agent cannot tell ftrun from another agent,
// which holds the same key. MUNGE tells hosts apart: the munged of each
// node writes its own address into every credential it seals
// (ENCODE_HOST), and a process on another node cannot make it write
// another. So after the handshake on an srun link, both sides prove where
// they run:
//
//	A→L  hello   its host name (informative only)
//	A→L  proof   a munge credential sealed on the agent's host for this
//	             user, of "ftrma-agent-proof1 JOB X"
//	L→A  proof   ftrun's, of "ftrma-ftrun-proof1 JOB X", once it accepted
//	             the agent's
//
// where X is the TLS session's exported key (RFC 8446, 7.5: label "ftrma
// host proof", 32 bytes, in hex), which both ends of one session compute
// and no other session shares. ftrun opens the agent's credential
// (unmunge) and requires its own uid as the sealer, JOB, and this link's
// X: a credential made for another link (an agent that poses as ftrun to
// a real agent and relays its proof) is refused. The credential's
// ENCODE_HOST must be an address of exactly one of the step's nodes as
// Slurm knows them (scontrol show node: NodeAddr, NodeHostName and
// NodeName, resolved): that node is the link's host, whatever the hello
// says. The agent checks ftrun's credential likewise (its own uid, JOB, X)
// and that it was sealed where the boot line was (the same ENCODE_HOST),
// and obeys nothing before. A host broken into can therefore neither pose
// as another host's agent to ftrun nor as ftrun to another host's agent.
//
// A munged whose origin address is not the node's (its host name resolves
// to a loopback address, as Debian's /etc/hosts has it) makes ftrun refuse
// the agent, saying so: start munged with --origin=ADDRESS.

const (
	proofAgentMagic = "ftrma-agent-proof1"
	proofFtrunMagic = "ftrma-ftrun-proof1"
	proofLabel      = "ftrma host proof"
)

// msgHostProof carries a host proof on an srun link, both ways.
const msgHostProof byte = 43

// linkBinding is the exported key of the TLS session of tc, in hex.
func linkBinding(tc *tls.Conn) (string, error) {
	st := tc.ConnectionState()
	x, err := st.ExportKeyingMaterial(proofLabel, nil, 32)
	if err != nil {
		return "", fmt.Errorf("host proof: %w", err)
	}
	return hex.EncodeToString(x), nil
}

// makeProof seals the proof of kind (proofAgentMagic or proofFtrunMagic)
// for job on the link tc with munge.
func makeProof(kind, job string, tc *tls.Conn) ([]byte, error) {
	x, err := linkBinding(tc)
	if err != nil {
		return nil, err
	}
	cred, err := mungeCredential(kind + " " + job + " " + x + "\n")
	if err != nil {
		return nil, fmt.Errorf("host proof: %w", err)
	}
	return []byte(cred), nil
}

// checkProof opens the proof cred of kind for job on the link tc and
// returns the address of the host it was sealed on. It fails unless this
// process's user sealed it, for job and this link.
func checkProof(cred []byte, kind, job string, tc *tls.Conn) (origin string, err error) {
	x, err := linkBinding(tc)
	if err != nil {
		return "", err
	}
	payload, origin, err := mungeOpen(string(cred))
	if err != nil {
		return "", fmt.Errorf("host proof: %w", err)
	}
	f := strings.Fields(payload)
	switch {
	case len(f) != 3 || f[0] != kind:
		return "", fmt.Errorf("host proof: not a %s credential", kind)
	case f[1] != job:
		return "", fmt.Errorf("host proof: made for job %q, not this job", jobwire.Printable([]byte(f[1])))
	case f[2] != x:
		return "", errors.New("host proof: made for another link (relayed?)")
	}
	return origin, nil
}

// nodeAddrs maps each address of the Slurm nodes hosts to the node: from
// scontrol show node, their NodeAddr, NodeHostName and NodeName, each an
// address or resolved. An address of two nodes maps to neither (it proves
// nothing).
func nodeAddrs(hosts []string, lookup func(string) ([]string, error)) (map[string]string, error) {
	cmd := exec.Command("scontrol", "show", "node", "-o", strings.Join(hosts, ","))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("scontrol show node: %v%s", err, said(strings.TrimSpace(errb.String())))
	}
	return parseNodeAddrs(out.String(), hosts, lookup)
}

// parseNodeAddrs reads scontrol show node -o output (see nodeAddrs).
func parseNodeAddrs(text string, hosts []string, lookup func(string) ([]string, error)) (map[string]string, error) {
	owner := map[string]string{}
	shared := map[string]bool{}
	found := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		node := fields["NodeName"]
		if node == "" || !slices.Contains(hosts, node) {
			continue
		}
		found[node] = true
		var addrs []string
		for _, name := range []string{fields["NodeAddr"], fields["NodeHostName"], node} {
			if name == "" || name == "(null)" {
				continue
			}
			if ip := net.ParseIP(name); ip != nil {
				addrs = append(addrs, ip.String())
				continue
			}
			if ips, err := lookup(name); err == nil {
				for _, s := range ips {
					if ip := net.ParseIP(s); ip != nil {
						addrs = append(addrs, ip.String())
					}
				}
			}
		}
		for _, a := range addrs {
			if o, ok := owner[a]; ok && o != node {
				shared[a] = true
			}
			owner[a] = node
		}
	}
	for a := range shared {
		delete(owner, a)
	}
	for _, h := range hosts {
		if !found[h] {
			return nil, fmt.Errorf("scontrol show node says nothing of %s", h)
		}
	}
	return owner, nil
}

// proofHost is the node of the step whose address origin is, from
// nodeAddrs' map, or an error that says what is wrong.
func proofHost(origin string, addrs map[string]string) (string, error) {
	if node, ok := addrs[origin]; ok {
		return node, nil
	}
	if ip := net.ParseIP(origin); ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return "", fmt.Errorf("its munged seals credentials as from %q, no address of a host: start munged on every node with --origin=ITS-ADDRESS", origin)
	}
	return "", fmt.Errorf("its proof was sealed on %s, an address of no node of the step (or of several)", origin)
}
