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
	if len(systems) == 2 {
		head = append(head, "ratio "+systems[0]+"/"+systems[1])
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
		if len(systems) == 2 {
			a, aok := vals[k][systems[0]]
			b, bok := vals[k][systems[1]]
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
