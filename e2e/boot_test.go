package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An agent started through Slurm (ftrun agent --boot --munge) obeys only a
// boot line sealed with munge by its own user: a line in clear (what anyone
// on the path of the step's unencrypted input could write) and a line
// another user sealed for this user (munge -u) are refused; a line this
// user sealed is opened and obeyed (the agent then dials the ftrun it
// names, here an address nobody listens on). Runs where the cluster's
// munged does (needCluster).
func TestAgentBootLineMustBeOwnSealed(t *testing.T) {
	needCluster(t)
	ftrun := filepath.Join(bins(t), "ftrun")
	line := "ftrma-boot1 job1 srun " + strings.Repeat("ab", 32) + " 127.0.0.1:1\n"
	seal := func(as ...string) string {
		cmd := exec.Command("munge", "-s", line)
		if len(as) > 0 {
			cmd = exec.Command("runuser", append([]string{"-u", as[0], "--", "munge", "-u", "0", "-s", line}, as[1:]...)...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		return "ftrma-boot1-munge " + strings.TrimSpace(string(out)) + "\n"
	}
	boot := func(input string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, ftrun, "agent", "--boot", "--munge")
		cmd.Stdin = strings.NewReader(input)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Run()
		return out.String(), cmd.ProcessState.ExitCode()
	}
	for _, c := range []struct {
		name, input, want string
	}{
		{"in clear", line, "refused a boot line not sealed with munge"},
		{"sealed by another user", seal("nobody"), "refused a boot line sealed by uid 65534"},
		{"sealed by this user", seal(), "cannot reach ftrun"},
	} {
		out, code := boot(c.input)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want a failure saying %q:\n%s", c.name, code, c.want, out)
		}
	}
}
