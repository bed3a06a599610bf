package result

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rs side by side: one row per Key (in first-seen order),
// one value column per system in systems, and, when exactly two systems are
// given, a ratio column systems[0]/systems[1]. A copies column appears only
// when some result has copies. Missing values print as "-". Results of
// systems not listed are ignored.
func WriteTable(w io.Writer, rs []Result, systems []string) error {
	var ratios [][2]string
	if len(systems) == 2 {
		ratios = [][2]string{{systems[0], systems[1]}}
	}
	return writeTable(w, rs, systems, ratios, "ratio ")
}

// WriteTableRatios prints rs as WriteTable does, with one ratio column
// base/other for every other system in systems (headed "base/other"), or
// none when base is "".
func WriteTableRatios(w io.Writer, rs []Result, systems []string, base string) error {
	var ratios [][2]string
	if base != "" {
		for _, s := range systems {
			if s != base {
				ratios = append(ratios, [2]string{base, s})
			}
		}
	}
	return writeTable(w, rs, systems, ratios, "")
}

func writeTable(w io.Writer, rs []Result, systems []string, ratios [][2]string, ratioPrefix string) error {
	type cell struct {
		v    float64
		unit string
	}
	var rows []Key
	vals := make(map[Key]map[string]cell)
	hasCopies := false
	for _, r := range rs {
		if !slices.Contains(systems, r.System) {
			continue
		}
		k := r.Key()
		if vals[k] == nil {
			vals[k] = make(map[string]cell)
			rows = append(rows, k)
		}
		vals[k][r.System] = cell{r.Value, r.Unit}
		hasCopies = hasCopies || r.Copies != 0
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"bench", "size"}
	if hasCopies {
		head = append(head, "copies")
	}
	head = append(head, "unit")
	head = append(head, systems...)
	for _, r := range ratios {
		head = append(head, ratioPrefix+r[0]+"/"+r[1])
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))

	for _, k := range rows {
		row := []string{k.Bench, strconv.Itoa(k.Size)}
		if hasCopies {
			c := "-"
			if k.Copies != 0 {
				c = strconv.Itoa(k.Copies)
			}
			row = append(row, c)
		}
		unit := ""
		for _, sys := range systems {
			if c, ok := vals[k][sys]; ok {
				unit = c.unit
				break
			}
		}
		row = append(row, unit)
		for _, sys := range systems {
			c, ok := vals[k][sys]
			if !ok {
				row = append(row, "-")
				continue
			}
			row = append(row, FormatValue(c.v))
		}
		for _, r := range ratios {
			a, aok := vals[k][r[0]]
			b, bok := vals[k][r[1]]
			if aok && bok && b.v != 0 {
				row = append(row, strconv.FormatFloat(a.v/b.v, 'f', 2, 64))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}
