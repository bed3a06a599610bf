package main

import (
	"github.com/ftrma/ftrma/internal/result"

	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench/RESULTS.md is what the JSON files make: a changed number without a
// regenerated page fails here.
func TestPageUpToDate(t *testing.T) {
	var page bytes.Buffer
	if err := generate(&page, ".."); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(filepath.Join("..", "RESULTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, page.Bytes()) {
		t.Fatalf("bench/RESULTS.md is out of date: run go run ./bench/results from the module root")
	}
}

// The page follows the JSON: a value changed in a file changes its cell; a
// missing file is an error, except the store's, which the page says is not
// recorded; the store's plot appears when its SVG exists.
func TestPageFollowsJSON(t *testing.T) {
	dir := t.TempDir()
	for _, s := range sources {
		if s.missing != "" {
			continue // tried below both without and with the file
		}
		b, err := os.ReadFile(filepath.Join("..", s.file))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(dir, s.file)), 0o755)
		if s.file == "results/ft.json" {
			b = bytes.Replace(b, []byte(`"value": 1.971685,`), []byte(`"value": 9.99,`), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, s.file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var page bytes.Buffer
	if err := generate(&page, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "| detect_p50 | 4 | 9.99 ms | 1.43 ms |") {
		t.Errorf("the changed value is not on the page:\n%s", page.String())
	}
	if !strings.Contains(page.String(), "No run recorded yet") || strings.Contains(page.String(), "store.svg") {
		t.Errorf("without store.json the page should say so, and show no plot")
	}
	os.WriteFile(filepath.Join(dir, "results/store.json"), []byte(`[{"bench":"put_p50","size":64,"copies":3,"system":"redis","value":41.5,"unit":"us"}]`), 0o644)
	os.WriteFile(filepath.Join(dir, "results/store.svg"), []byte("<svg/>"), 0o644)
	page.Reset()
	if err := generate(&page, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "| put_p50 | 64 | 3 | 41.5 us |") || !strings.Contains(page.String(), "(results/store.svg)") {
		t.Errorf("the store's table and plot are not on the page:\n%s", page.String())
	}
	os.Remove(filepath.Join(dir, "results/ft.json"))
	if err := generate(&page, dir); err == nil {
		t.Errorf("a missing results file was not an error")
	}
}

func TestFormat(t *testing.T) {
	for v, want := range map[float64]string{0.046: "0.046", 0.005: "0.005", 2.47: "2.47", 136: "136", 1220: "1220", 30.3e6: "30.3 M", 0.157: "0.157", 2.6089891831406193: "2.609", 193.359: "193.4", 0.5: "0.5", 123456.7: "123457"} {
		if got := format(v); got != want {
			t.Errorf("format(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestRatioColumns(t *testing.T) {
	rs := []result.Result{
		{Bench: "put_lat", Size: 8, System: "ftrma-shm", Value: 0.05, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: "openmpi-shm", Value: 0.02, Unit: "us"},
		{Bench: "get_lat", Size: 8, System: "ftrma-shm", Value: 0.06, Unit: "us"},
	}
	var b bytes.Buffer
	table(&b, rs, "size (B)", [][2]string{{"ftrma-shm", "openmpi-shm"}})
	for _, want := range []string{
		"| bench | size (B) | ftrma-shm | openmpi-shm | ftrma-shm/openmpi-shm |",
		"| put_lat | 8 | 0.05 us | 0.02 us | 2.5 x |",
		"| get_lat | 8 | 0.06 us | – | – |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}
