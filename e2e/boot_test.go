package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An agent started through Slurm (ftrun agent --boot --munge) obeys only a
// boot line sealed with munge by its own user: a line in clear (what anyone
// on the path of the step's unencrypted input could write) and a line
// another user sealed for this user (munge -u) are refused, and so is a
// sealed line altered on the way; a line this user sealed is opened and
// obeyed (the agent then dials the ftrun it names, here an address nobody
// listens on). Runs where the cluster's munged does (needCluster).
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
	// forge alters one character of a sealed line's credential, in the
	// middle of its encrypted part, as a relay on srun's input could.
	forge := func(line string) string {
		b := []byte(line)
		i := len(b) / 2
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
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
		{"sealed by another user", seal("nobody"), "boot line: refused a credential sealed by uid 65534"},
		{"forged", forge(seal()), "boot line: unmunge:"},
		{"sealed by this user", seal(), "cannot reach ftrun"},
	} {
		out, code := boot(c.input)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want a failure saying %q:\n%s", c.name, code, c.want, out)
		}
	}
}

// Every agent of an srun step reads the same boot line, so the link key
// alone does not tell ftrun which host an agent runs on. Here an impostor
// on h3 (outside the step) reads the step's line first and dials back
// saying it runs on h2: ftrun refuses it, because its munge proof was
// sealed on h3, and the ranks of h2 run on h2, started by the real agent.
func TestSrunAgentMustProveItsHost(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	srun, err := exec.LookPath("srun")
	if err != nil {
		t.Fatalf("no srun beside the cluster: %v", err)
	}
	wrap := t.TempDir()
	impostorLog := filepath.Join(wrap, "impostor.log")
	// The wrapper srun that ftrun runs: it hands the boot line to the
	// impostor, gives it a head start, then runs the real srun with the
	// line and the rest of ftrun's input (the agents end when it closes).
	script := `#!/bin/sh
IFS= read -r line
{ printf '%s\n' "$line"; sleep 30; } | timeout 40 "$CLUSTER" on "$DIR" h3 env SLURMD_NODENAME=h2 "$FTRUN" agent --boot --munge >"$LOG" 2>&1 &
sleep 1
{ printf '%s\n' "$line"; exec cat; } | exec "$SRUN" "$@"
`
	if err := os.WriteFile(filepath.Join(wrap, "srun"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, "salloc", "-N", "2", "-w", "h1,h2", "--ntasks-per-node", "1", "--quiet",
		filepath.Join(bin, "ftrun"), "-v", "--tag-output", "sh", "-c", "hostname; exec "+filepath.Join(bin, "testprog")+" idle 200ms")
	cmd.Env = append(cmd.Env, "PATH="+wrap+":"+os.Getenv("PATH"), "CLUSTER="+clusterScript(), "DIR="+dir,
		"FTRUN="+filepath.Join(bin, "ftrun"), "SRUN="+srun, "LOG="+impostorLog)
	out, err := cmd.CombinedOutput()
	impostor, _ := os.ReadFile(impostorLog)
	if err != nil || !strings.Contains(string(out), "[0] h1\n") || !strings.Contains(string(out), "[1] h2\n") || strings.Count(string(out), "failed 0") != 2 {
		t.Fatalf("the job beside the impostor: %v\n%s\nimpostor:\n%s", err, out, impostor)
	}
	if !strings.Contains(string(out), `saying it runs on "h2"`) || !strings.Contains(string(out), "198.18.60.13") {
		t.Errorf("ftrun does not say it refused the impostor:\n%s\nimpostor:\n%s", out, impostor)
	}
}
