package e2e

import (
	"bytes"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sniffer records every frame that crosses one network interface of the
// root namespace (a host's root-side veth of the cluster), as a tap on the
// wire between hosts would.
type sniffer struct {
	fd   int
	mu   sync.Mutex
	seen bytes.Buffer
	done chan struct{}
}

// htons is a 16-bit value in network order, as AF_PACKET wants its protocol.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

func startSniffer(t *testing.T, ifname string) *sniffer {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatalf("sniffer: %v", err)
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(syscall.ETH_P_ALL)))
	if err != nil {
		t.Fatalf("sniffer: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		syscall.Close(fd)
		t.Fatalf("sniffer: bind to %s: %v", ifname, err)
	}
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	s := &sniffer{fd: fd, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 1<<16)
		for {
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			if n > 0 {
				s.mu.Lock()
				s.seen.Write(buf[:n])
				s.mu.Unlock()
			}
			if err != nil && err != syscall.EAGAIN && err != syscall.EINTR {
				return
			}
		}
	}()
	t.Cleanup(s.stop)
	return s
}

// stop ends the capture and returns what it saw.
func (s *sniffer) stop() {
	syscall.Shutdown(s.fd, syscall.SHUT_RDWR)
	syscall.Close(s.fd)
	<-s.done
}

func (s *sniffer) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.seen.Bytes())
}

// The ranks' data between hosts is sealed by default: rank 0 on h1 puts a
// pattern into rank 1's window on h2 two hundred times over TCP, while a
// capture on h2's link records every frame. Sealed (ftrun's default), the
// pattern never shows on the wire and it lands; with --data-plain (which
// ftrun says at start) the capture reads it, so the capture can tell.
func TestClusterDataSealed(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 2, 1)
	const pattern = "rank data a tap on the wire must never read, 8x"
	for _, plain := range []bool{false, true} {
		args := []string{"--hostfile", hf, "--transport", "tcp", "--tag-output"}
		if plain {
			args = append(args, "--data-plain")
		}
		args = append(args, filepath.Join(bin, "testprog"), "secretput", pattern)
		sn := startSniffer(t, "ftc-h2")
		out, code, took := runCluster(t, dir, 2*time.Minute, filepath.Join(bin, "ftrun"), args...)
		time.Sleep(200 * time.Millisecond)
		sn.stop()
		wire := sn.bytes()
		shows := bytes.Contains(wire, []byte(pattern))
		said := regexp.MustCompile(`(?m)^ftrun: --data-plain: the ranks' TCP data between hosts crosses the network in clear`).MatchString(out)
		switch {
		case code != 0 || !strings.Contains(out, "[1] secretput verified\n"):
			t.Fatalf("plain %v: exit %d:\n%s", plain, code, out)
		case len(wire) < 10000:
			t.Fatalf("plain %v: the capture on h2's link saw %d bytes: it did not watch the job", plain, len(wire))
		case !plain && (shows || said):
			t.Errorf("sealed: the capture read the pattern %v; ftrun said plain %v:\n%s", shows, said, out)
		case plain && (!shows || !said):
			t.Errorf("--data-plain: the capture read the pattern %v, ftrun said so %v: the test cannot tell:\n%s", shows, said, out)
		}
		t.Logf("plain %v: %d bytes captured on h2's link, the pattern on the wire %v, job %v", plain, len(wire), shows, took.Round(time.Millisecond))
	}
}
