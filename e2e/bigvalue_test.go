package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBigTransferKeepsDetector runs four ranks at ftrun's default settings
// (on this 2-core machine: GOMAXPROCS=1 in every rank, and the detector's
// timeout of 60 ms stretched to 120 ms for two ranks per CPU) while rank 0
// moves 256 MB to rank 1 and back, three times, into fresh memory each time.
// A copy that held the processor (Go cannot preempt runtime.memmove), a
// heartbeat queued behind the whole transfer at its target, or a Send that
// waited for it would leave a healthy rank silent for longer than the
// timeout and get it declared failed and killed, as a 100 MB store put did
// (issue 11). No rank may be declared failed, every rank exits 0, and the
// data arrives intact.
func TestBigTransferKeepsDetector(t *testing.T) { eachTransport(t, testBigTransfer) }

func testBigTransfer(t *testing.T) {
	const n, size, rounds = 4, 256 << 20, 3
	out, code := ftrun(t, 2*time.Minute, "-n", fmt.Sprint(n), "--tag-output",
		filepath.Join(bins(t), "testprog"), "bigmove", fmt.Sprint(size), fmt.Sprint(rounds))
	if strings.Contains(out, "declared failed") || strings.Contains(out, "rank(s) failed") {
		t.Fatalf("a healthy rank was declared failed while %d MB moved:\n%s", size>>20, out)
	}
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{`\[0\] bigmove moved`, `\[1\] bigmove window verified`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("no %q in the output:\n%s", want, out)
		}
	}
	if got := len(regexp.MustCompile(`(?m)^\[\d+\] bigmove failed 0$`).FindAllString(out, -1)); got != n {
		t.Fatalf("%d of %d ranks report no failed rank:\n%s", got, n, out)
	}
	t.Logf("%s", regexp.MustCompile(`\[0\] bigmove moved.*`).FindString(out))
}
