package launcher

import (
	"bytes"
	"strings"
	"testing"
)

// writes records each Write separately.
type writes struct{ calls []string }

func (w *writes) Write(p []byte) (int, error) {
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func TestForwardLines(t *testing.T) {
	long := strings.Repeat("x", lineBuffer+10)
	tests := []struct {
		name, in, prefix string
		want             []string // one entry per Write
	}{
		{"tagged", "a\nb\n", "[3] ", []string{"[3] a\n", "[3] b\n"}},
		{"untagged", "a\nb\n", "", []string{"a\n", "b\n"}},
		{"tagged partial last line", "a\nlast", "[0] ", []string{"[0] a\n", "[0] last\n"}},
		{"untagged partial last line", "a\nlast", "", []string{"a\n", "last"}},
		{"empty lines", "\n\n", "[1] ", []string{"[1] \n", "[1] \n"}},
		{"nothing", "", "[1] ", nil},
		{"long line tagged once", long + "\nz\n", "[2] ", []string{"[2] " + long[:lineBuffer], long[lineBuffer:] + "\n", "[2] z\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := new(writes)
			s := &sink{stdout: w, stderr: w}
			forwardLines(s, w, strings.NewReader(tt.in), tt.prefix, nil)
			if len(w.calls) != len(tt.want) {
				t.Fatalf("got %d writes %q, want %d %q", len(w.calls), abbrev(w.calls), len(tt.want), abbrev(tt.want))
			}
			for i := range tt.want {
				if w.calls[i] != tt.want[i] {
					t.Errorf("write %d = %q, want %q", i, abbrev(w.calls[i:i+1]), abbrev(tt.want[i:i+1]))
				}
			}
		})
	}
}

func abbrev(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		if len(x) > 40 {
			x = x[:20] + "..." + x[len(x)-20:]
		}
		out[i] = x
	}
	return out
}

func TestReportf(t *testing.T) {
	var errs bytes.Buffer
	s := &sink{stdout: new(bytes.Buffer), stderr: &errs}
	s.reportf("killed rank %d (--kill %v)", 3, KillSpec{3, 1e9})
	if got, want := errs.String(), "ftrun: killed rank 3 (--kill 3@1s)\n"; got != want {
		t.Fatalf("reportf wrote %q, want %q", got, want)
	}
}
