package launcher

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// guestVerbs reports whether the process tests run over verbs too: only
// where FTRMA_E2E_TRANSPORTS lists verbs (the Soft-RoCE guest of
// scripts/verbs-test.sh, which also gives ftrun in FTRMA_E2E_BINDIR). The
// flags add the guest's failure detector timeout (FTRMA_E2E_HB_TIMEOUT).
func guestVerbs(t *testing.T) []string {
	t.Helper()
	if !slices.Contains(strings.Split(os.Getenv("FTRMA_E2E_TRANSPORTS"), ","), "verbs") {
		t.Skip("verbs process test: run in the Soft-RoCE guest (scripts/verbs-test.sh)")
	}
	flags := []string{"--transport", "verbs"}
	if d := os.Getenv("FTRMA_E2E_HB_TIMEOUT"); d != "" {
		flags = append(flags, "--hb-timeout", d)
	}
	return flags
}

// TestProcessReplace and TestRespawnTransport over verbs: the spare's queue
// pairs toward the live ranks, and theirs toward it, connect at admission.
func TestVerbsProcessReplace(t *testing.T) {
	flags := guestVerbs(t)
	t.Run("respawn", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		cmd := helperCmd(t, ctx, "spawnxfer", append([]string{"-n", "2", "--respawn=1"}, flags...))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ftrun: %v\n%s", err, out)
		}
		wantLines(t, string(out),
			`rank 2 spawned with p, failed at join \[\], live \[0 1\]`,
			`rank 0 of 3 exchanged messages and writes with ranks \[1 2\]`,
			`rank 1 of 3 exchanged messages and writes with ranks \[0 2\]`,
			`rank 2 of 3 exchanged messages and writes with ranks \[0 1\]`,
		)
	})
	t.Run("replace", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		cmd := helperCmd(t, ctx, "replace", append([]string{"-n", "3", "--respawn=1"}, flags...))
		out, _ := cmd.CombinedOutput() // rank 1's exit fails the job
		wantLines(t, string(out),
			`rank 3 replaces world rank 1 as rank 1 of 3`,
			`rank 0 is 0 of 3 after replace, its left neighbour is world rank 2`,
			`rank 3 is 1 of 3 after replace, its left neighbour is world rank 0`,
			`rank 2 is 2 of 3 after replace, its left neighbour is world rank 3`,
		)
	})
}
