package ftrma_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// allowed lists, for each package of the module, the module packages it may
// import directly: the layering of DESIGN.md (lower never imports higher, and
// only a rank's start-up, the launcher, commands, examples and benchmarks
// name a concrete transport; start-up sits above comm, building the world
// it hands comm; ranks link startup, never the launcher, and the two meet in
// internal/jobwire). A package missing from the list may import
// nothing of the module until it is added here.
var allowed = map[string][]string{
	// The shared values, the transports.
	"":                        {},
	"transport":               {""},
	"transport/tcp":           {"", "transport", "internal/seclink"},
	"transport/multi":         {"", "transport"},
	"transport/transporttest": {"", "transport"},
	"transport/memnet":        {"", "transport"},
	"transport/shm":           {"", "transport"},
	"transport/verbs":         {"", "transport"},
	// The protocols and the runtime.
	"failure":                 {"", "internal/overlay"},
	"revoke":                  {"", "internal/overlay", "failure"},
	"agree":                   {""},
	"comm":                    {"", "transport", "failure", "revoke", "agree", "comm/internal/admission"},
	"comm/commtest":           {"", "transport", "transport/memnet", "transport/shm", "transport/verbs", "comm", "comm/internal/admission"},
	"comm/internal/admission": {"", "transport"},
	"window":                  {"", "transport"},
	"window/rmacheck":         {"", "window"},
	"store":                   {"", "transport", "window"},
	// A rank's start-up, above comm; ftrun's side, which ranks do not link.
	"startup":                   {"", "comm", "transport", "transport/shm", "transport/tcp", "transport/verbs", "transport/multi", "internal/seclink", "internal/jobwire", "failure"},
	"launcher":                  {"", "transport/shm", "transport/verbs", "internal/seclink", "launcher/internal/members", "internal/jobwire", "launcher/internal/arbiter", "failure"},
	"launcher/internal/members": {""},
	"launcher/internal/arbiter": {""},
	// internal/, by audience: the launcher's and start-up's wire and links,
	// the protocols' overlay, the checkers of tests, benchmarks' results.
	"internal/jobwire":         {"", "internal/seclink", "failure"},
	"internal/seclink":         {},
	"internal/overlay":         {},
	"internal/check/kvcheck":   {},
	"internal/check/scaletest": {},
	"internal/check/script":    {},
	"internal/check/simq":      {},
	"internal/result":          {},
	// Programs, benchmarks and end-to-end tests.
	"cmd/ftrun":           {"launcher"},
	"cmd/ftkv":            {"comm", "startup", "internal/result", "store"},
	"examples/ckpt":       {"", "comm", "startup", "store"},
	"examples/rmademo":    {"startup", "window/rmacheck"},
	"examples/ftdemo":     {"", "comm", "startup", "window/rmacheck", "window"},
	"bench/rma":           {"internal/result", "bench/internal/host"},
	"bench/rma/rank":      {"", "comm", "startup", "window"},
	"bench/ft":            {"internal/result", "bench/internal/host", "bench/internal/ulfm", "failure"},
	"bench/ft/rank":       {"", "comm", "startup", "store"},
	"bench/store":         {"internal/result", "bench/internal/host"},
	"bench/results":       {"internal/result"},
	"bench/verbslat":      {"internal/result"},
	"bench/ulfm":          {"internal/result", "bench/internal/host", "bench/internal/ulfm"},
	"bench/internal/host": {},
	"bench/internal/ulfm": {},
	"e2e":                 {},
	"e2e/testprog":        {"", "comm", "startup", "window/rmacheck", "store", "window"},
	"scripts/testsum":     {},
}

const module = "github.com/ftrma/ftrma"

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "./...", "./bench/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		seen++
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		ok, listed := allowed[name]
		if !listed {
			t.Errorf("package %q is not in the layering table of layering_test.go", name)
			continue
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			permitted := false
			for _, a := range ok {
				permitted = permitted || a == dep
			}
			if !permitted {
				t.Errorf("%s imports %s, which the layering forbids", p.ImportPath, imp)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("go list found only %d packages", seen)
	}
}
