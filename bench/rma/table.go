package main

import (
	"io"
	"slices"

	"github.com/ftrma/ftrma/internal/result"
)

// writeTable prints medians with one column per system in systems (in that
// order) and then one ratio column a/b for each of ratioPairs whose two
// systems are both in systems.
//
// The ratios are passed to result.WriteTableRatios as extra "systems" named
// "a/b" whose value is the ratio of the two medians of a row, so that the
// table keeps the layout and number format of the other bench drivers. They
// exist only for the table: the JSON holds the medians alone.
func writeTable(w io.Writer, medians []result.Result, systems []string) error {
	cols := append([]string(nil), systems...)
	rs := append([]result.Result(nil), medians...)
	for _, p := range ratioPairs {
		if !slices.Contains(systems, p[0]) || !slices.Contains(systems, p[1]) {
			continue
		}
		name := p[0] + "/" + p[1]
		cols = append(cols, name)
		rs = append(rs, ratios(medians, p[0], p[1], name)...)
	}
	return result.WriteTableRatios(w, rs, cols, "")
}

// ratios returns, for every row that has a value of both a and b (b not 0),
// a result of system name holding a/b.
func ratios(medians []result.Result, a, b, name string) []result.Result {
	byKey := make(map[result.Key]float64)
	for _, m := range medians {
		if m.System == b && m.Value != 0 {
			byKey[m.Key()] = m.Value
		}
	}
	var out []result.Result
	for _, m := range medians {
		if m.System != a {
			continue
		}
		if v, ok := byKey[m.Key()]; ok {
			r := m
			r.System, r.Value, r.Unit = name, m.Value/v, "ratio"
			out = append(out, r)
		}
	}
	return out
}
