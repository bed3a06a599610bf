package startup

import (
	"context"
	"encoding/hex"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/tcp"
)

// setJobEnv sets (or, for "-", unsets) the job variables for one test.
func setJobEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, name := range []string{jobwire.EnvRank, jobwire.EnvSize, jobwire.EnvRendezvous, jobwire.EnvSecret, jobwire.EnvJob, jobwire.EnvLocalSize,
		jobwire.EnvSpin, jobwire.EnvHBPeriod, jobwire.EnvHBTimeout, jobwire.EnvTransport, jobwire.EnvVerbsDevice, jobwire.EnvVerbsGID, jobwire.EnvHostAddr, jobwire.EnvLocalRanks,
		jobwire.EnvSpares, jobwire.EnvSpawn, jobwire.EnvSparesLost, jobwire.EnvSeal} {
		t.Setenv(name, "") // restored after the test
		if v, ok := vars[name]; ok && v != "-" {
			os.Setenv(name, v)
		} else {
			os.Unsetenv(name)
		}
	}
}

func goodEnv() map[string]string {
	return map[string]string{
		jobwire.EnvRank:       "2",
		jobwire.EnvSize:       "4",
		jobwire.EnvRendezvous: "127.0.0.1:1234",
		jobwire.EnvSecret:     hex.EncodeToString(testSecret(1)),
		jobwire.EnvJob:        "j1",
		jobwire.EnvLocalSize:  "4",
	}
}

func TestReadEnv(t *testing.T) {
	setJobEnv(t, goodEnv())
	if !InJob() {
		t.Fatal("InJob() = false with FTRMA_RANK set")
	}
	e, err := readEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := jobEnv{rank: 2, size: 4, rendezvous: "127.0.0.1:1234", secret: testSecret(1), job: "j1", localSize: 4, transport: jobwire.TransportTCP, verbsGID: -1, lease: jobwire.LeaseTerm, seal: tcp.SealRemote}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("readEnv() = %+v, want %+v", e, want)
	}
	if v, ok := os.LookupEnv(jobwire.EnvSecret); ok {
		t.Fatalf("FTRMA_SECRET=%q still set after readEnv", v)
	}
	if _, err := readEnv(); err == nil || !strings.Contains(err.Error(), "removed from the environment") {
		t.Fatalf("second readEnv: %v, want a hint that the secret was already read", err)
	}
}

func TestReadEnvErrors(t *testing.T) {
	tests := []struct {
		name, variable, value, want string
	}{
		{"not in a job", jobwire.EnvRank, "-", "not started by ftrun (FTRMA_RANK unset)"},
		{"size unset", jobwire.EnvSize, "-", "FTRMA_SIZE unset"},
		{"size zero", jobwire.EnvSize, "0", "FTRMA_SIZE"},
		{"size not a number", jobwire.EnvSize, "many", "FTRMA_SIZE"},
		{"rank too big", jobwire.EnvRank, "4", "FTRMA_RANK=\"4\": not a rank in [0, 4)"},
		{"rank negative", jobwire.EnvRank, "-1", "not a rank"},
		{"rank not a number", jobwire.EnvRank, "two", "not a rank"},
		{"no rendezvous", jobwire.EnvRendezvous, "-", "FTRMA_RENDEZVOUS unset"},
		{"no secret", jobwire.EnvSecret, "-", "FTRMA_SECRET unset"},
		{"secret not hex", jobwire.EnvSecret, "zz", "FTRMA_SECRET"},
		{"secret too short", jobwire.EnvSecret, "abcd", "FTRMA_SECRET"},
		{"local size zero", jobwire.EnvLocalSize, "0", "FTRMA_LOCAL_SIZE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := goodEnv()
			vars[tt.variable] = tt.value
			setJobEnv(t, vars)
			_, err := readEnv()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("readEnv() error %v, want it to contain %q", err, tt.want)
			}
			if _, ok := os.LookupEnv(jobwire.EnvSecret); ok {
				t.Fatal("FTRMA_SECRET still set after a failed readEnv")
			}
		})
	}
}

func TestJoinOutsideJob(t *testing.T) {
	setJobEnv(t, nil)
	if InJob() {
		t.Fatal("InJob() = true without FTRMA_RANK")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := Join(ctx, nopReceiver{}); err == nil || err.Error() != "launcher: not started by ftrun (FTRMA_RANK unset)" {
		t.Fatalf("Join outside a job: %v", err)
	}
}

func TestDetectorSettings(t *testing.T) {
	cpus := runtime.NumCPU()
	const ms20 = 20 * time.Millisecond
	cases := []struct {
		period, timeout, local string
		wantP, wantT           time.Duration
	}{
		{"", "", "1", ms20, 60 * time.Millisecond},
		{"", "", strconv.Itoa(cpus), ms20, 60 * time.Millisecond}, // full, one rank per CPU: x1
		{"", "", strconv.Itoa(cpus + 1), ms20, 2 * 60 * time.Millisecond},
		{"", "", strconv.Itoa(2*cpus + 1), ms20, 3 * 60 * time.Millisecond},
		{"", "250ms", strconv.Itoa(4 * cpus), ms20, 250 * time.Millisecond}, // explicit wins
		{"100ms", "", strconv.Itoa(cpus + 1), 100 * time.Millisecond, 600 * time.Millisecond},
		{"100ms", "", "1", 100 * time.Millisecond, 300 * time.Millisecond},
		{"junk", "junk", "", ms20, 60 * time.Millisecond},
	}
	for _, c := range cases {
		t.Setenv(jobwire.EnvHBPeriod, c.period)
		t.Setenv(jobwire.EnvHBTimeout, c.timeout)
		t.Setenv(jobwire.EnvLocalSize, c.local)
		p, to := DetectorSettings()
		if p != c.wantP || to != c.wantT {
			t.Errorf("period %q timeout %q local %q: got %v, %v; want %v, %v", c.period, c.timeout, c.local, p, to, c.wantP, c.wantT)
		}
		// The numbers are the detector's own preset rule, not a copy.
		wp, _ := time.ParseDuration(c.period)
		wt, _ := time.ParseDuration(c.timeout)
		local, _ := strconv.Atoi(c.local)
		if want := (failure.Config{Period: max(wp, 0), Timeout: max(wt, 0)}).ForHost(local, cpus); p != want.Period || to != want.Timeout {
			t.Errorf("period %q timeout %q local %q: got %v, %v; failure.Config.ForHost gives %v, %v", c.period, c.timeout, c.local, p, to, want.Period, want.Timeout)
		}
	}
}

// FTRMA_HOST_ADDR must be an IP; it becomes the transport's listen address.
func TestReadEnvHostAddr(t *testing.T) {
	for v, want := range map[string]string{"": "", "10.1.2.3": "10.1.2.3", "::1": "::1", "node2": "error"} {
		setJobEnv(t, goodEnv())
		t.Setenv(jobwire.EnvHostAddr, v)
		e, err := readEnv()
		switch {
		case want == "error" && err == nil:
			t.Errorf("%s=%q accepted", jobwire.EnvHostAddr, v)
		case want != "error" && (err != nil || e.hostAddr != want):
			t.Errorf("%s=%q: %q, %v", jobwire.EnvHostAddr, v, e.hostAddr, err)
		}
	}
}

// One rule fits a job to a host's CPUs (jobwire.CPUShare), and the
// detector's default timeout and busy-polling follow it: the timeout times
// the ranks per CPU from as many ranks as CPUs on, no busy-polling from more
// ranks than CPUs on. (The launcher's tests check that GOMAXPROCS follows it
// too.)
func TestOneCPURule(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, local := range []int{1, cpus - 1, cpus, cpus + 1, 2 * cpus, 2*cpus + 1, 5 * cpus} {
		if local < 1 {
			continue
		}
		full, perCPU := jobwire.CPUShare(local)
		t.Setenv(jobwire.EnvHBPeriod, "")
		t.Setenv(jobwire.EnvHBTimeout, "")
		t.Setenv(jobwire.EnvLocalSize, strconv.Itoa(local))
		_, timeout := DetectorSettings()
		want := failure.DefaultTimeout
		if full {
			want = time.Duration(perCPU) * failure.DefaultTimeout
		}
		if timeout != want || timeout != failure.DefaultLocalConfig(local, cpus).Timeout {
			t.Errorf("%d ranks on %d CPUs: detector timeout %v, want %v", local, cpus, timeout, want)
		}
		spin := jobEnv{localSize: local}.transportSpin()
		if wantOff := perCPU > 1; (spin < 0) != wantOff || (!wantOff && spin != 0) {
			t.Errorf("%d ranks on %d CPUs: spin %v, want it off: %v", local, cpus, spin, wantOff)
		}
		if got := (jobEnv{localSize: local, spin: time.Millisecond}).transportSpin(); got != time.Millisecond {
			t.Errorf("%d ranks: --spin 1ms gave %v", local, got)
		}
	}
}

// nopReceiver is a transport.Receiver that drops what it is given.
type nopReceiver struct{}

func (nopReceiver) HandleMessage(ftrma.Rank, []byte) {}
func (nopReceiver) HandlePeerDown(ftrma.Rank, error) {}

// FTRMA_SEAL: unset seals the connections to other hosts, the three values
// map to the TCP transport's modes, anything else is refused.
func TestReadEnvSeal(t *testing.T) {
	for v, want := range map[string]tcp.SealMode{"-": tcp.SealRemote, jobwire.SealNone: tcp.SealNone, jobwire.SealRemote: tcp.SealRemote, jobwire.SealAll: tcp.SealAll} {
		env := goodEnv()
		env[jobwire.EnvSeal] = v
		setJobEnv(t, env)
		if e, err := readEnv(); err != nil || e.seal != want {
			t.Errorf("%s=%q: seal %v, %v; want %v", jobwire.EnvSeal, v, e.seal, err, want)
		}
	}
	env := goodEnv()
	env[jobwire.EnvSeal] = "yes"
	setJobEnv(t, env)
	if _, err := readEnv(); err == nil {
		t.Errorf("%s=yes accepted", jobwire.EnvSeal)
	}
}
