package launcher

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
)

// ftrun passes its log settings (and the shm transport's slow-path switch)
// on to the ranks (their base environment has no FTRMA_ variable), and -v
// asks for debug when ftrun sets no level.
func TestLogVars(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		verbose bool
		env     map[string]string
		want    []string
	}{
		{false, nil, nil},
		{true, nil, []string{"FTRMA_LOG=debug"}},
		{true, map[string]string{ftrma.EnvLog: "warn"}, []string{"FTRMA_LOG=warn"}},
		{false, map[string]string{ftrma.EnvLog: "error", ftrma.EnvLogFormat: "json"}, []string{"FTRMA_LOG=error", "FTRMA_LOG_FORMAT=json"}},
		{false, map[string]string{"FTRMA_SHM_SLOWPATH": "1"}, []string{"FTRMA_SHM_SLOWPATH=1"}},
	} {
		if got := logVars(&Config{Verbose: c.verbose}, env(c.env)); !slices.Equal(got, c.want) {
			t.Errorf("-v %v, env %v: %q, want %q", c.verbose, c.env, got, c.want)
		}
	}
	// ftrun's own environment (os.Getenv) sets no level here.
	t.Setenv(ftrma.EnvLog, "")
	t.Setenv(ftrma.EnvLogFormat, "")
	vars := rankVars(0, 1, rankRange(0, 1), "x", nil, 0, "j", "", &Config{Verbose: true})
	got := rankEnv([]string{"FTRMA_LOG=info", "HOME=/"}, vars, 1)
	if slices.Contains(got, "FTRMA_LOG=info") || !slices.Contains(got, "FTRMA_LOG=debug") {
		t.Errorf("rank environment with -v: %q", got)
	}
}

// A logger made for a printf-style sink writes the runtime's text lines,
// prefix first, from its level up.
func TestLogfLogger(t *testing.T) {
	var lines []string
	l := logfLogger(func(format string, args ...any) {
		lines = append(lines, strings.TrimSpace(format)+"|"+args[0].(string))
	}, "members: ", slog.LevelWarn)
	l.Info("dropped")
	l.Warn("memberlist: Suspect b has failed", ftrma.LogPeer, 2)
	want := []string{"%s|members: memberlist: Suspect b has failed peer=2 level=WARN"}
	if !slices.Equal(lines, want) {
		t.Fatalf("%q, want %q", lines, want)
	}
}
