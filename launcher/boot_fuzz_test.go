package launcher

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzParseBootLine: an agent reads its boot line from its standard input,
// whatever started it. parseBootLine never panics, and a line it accepts
// prints as one that parses to the same.
func FuzzParseBootLine(f *testing.F) {
	f.Add(bootLine{job: "j", label: "host1", key: make([]byte, 32), addrs: []string{"127.0.0.1:5", "[::1]:6"}}.String())
	f.Add(bootMagic + " j l 00 a")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseBootLine(s)
		if err != nil {
			return
		}
		again, err := parseBootLine(b.String())
		if err != nil || again.job != b.job || again.label != b.label || !bytes.Equal(again.key, b.key) || !slices.Equal(again.addrs, b.addrs) {
			t.Fatalf("%q parsed as %+v, which prints as %q and parses back as %+v (%v)", s, b, b.String(), again, err)
		}
	})
}
