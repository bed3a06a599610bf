package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/ftrma/ftrma/internal/result"
)

// A small SVG line plot: put_p50 against the copy count, one line per
// (system, value size), y on a log scale (the systems lie a decade or more
// apart).

type point struct{ x, y float64 }

type series struct {
	label  string
	color  string
	dash   string // SVG stroke-dasharray, "" for solid
	hollow bool   // open markers (sizes after the first)
	points []point
}

// systemColors gives each system one color; sizes differ by dash pattern.
var systemColors = map[string]string{
	sysFtrma:     "#d62728",
	sysFtrmaSHM:  "#ff7f0e",
	sysHazelcast: "#1f77b4",
	sysRedis:     "#2ca02c",
	sysEtcd:      "#9467bd",
}

var sizeDashes = []string{"", "8 4", "2 3", "10 3 2 3", "4 4"}

// plotSeries picks the put_p50 medians out of rs: one series per (system,
// size), systems in the table's order, sizes ascending, points by copies.
func plotSeries(rs []result.Result) []series {
	var sizes []int
	for _, r := range rs {
		if r.Bench == benchPutP50 && !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	slices.Sort(sizes)
	var out []series
	for _, sys := range allSystems {
		for si, size := range sizes {
			s := series{label: sys + " " + sizeName(size), color: systemColors[sys],
				dash: sizeDashes[si%len(sizeDashes)], hollow: si > 0}
			for _, r := range rs {
				if r.System == sys && r.Size == size && r.Bench == benchPutP50 && r.Copies > 0 && r.Value > 0 {
					s.points = append(s.points, point{float64(r.Copies), r.Value})
				}
			}
			if len(s.points) == 0 {
				continue
			}
			slices.SortFunc(s.points, func(a, b point) int { return int(a.x - b.x) })
			out = append(out, s)
		}
	}
	return out
}

// writePlot draws ss as an SVG document.
func writePlot(w io.Writer, title, xLabel, yLabel string, ss []series) error {
	const (
		width, height            = 900, 520
		left, right, top, bottom = 80, 230, 50, 60
		plotW, plotH             = width - left - right, height - top - bottom
	)
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, p := range s.points {
			if p.y <= 0 || math.IsNaN(p.y) || math.IsInf(p.y, 0) {
				return fmt.Errorf("plot: %s: value %v cannot go on a log scale", s.label, p.y)
			}
			xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
			ymin, ymax = math.Min(ymin, p.y), math.Max(ymax, p.y)
		}
	}
	if math.IsInf(xmin, 1) { // no points: an empty frame
		xmin, xmax, ymin, ymax = 1, 2, 1, 10
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	xmin, xmax = xmin-0.2, xmax+0.2                      // keep the markers off the frame
	lo := math.Pow(10, math.Floor(math.Log10(ymin*0.9))) // markers off the frame
	hi := math.Pow(10, math.Ceil(math.Log10(ymax*1.1)))
	if hi <= lo {
		hi = lo * 10
	}
	px := func(x float64) float64 { return left + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 {
		return top + plotH - (math.Log10(y)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" text-anchor="middle">%s</text>`+"\n", (left+width-right)/2, esc(title))

	// Grid and y ticks at 1, 2, 5 times each power of ten.
	for d := lo; d < hi*1.001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > hi*1.001 {
				break
			}
			y := py(v)
			stroke := "#e5e5e5"
			if m == 1 {
				stroke = "#c8c8c8"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`+"\n", left, f(y), left+plotW, f(y), stroke)
			fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, f(y), esc(tickLabel(v)))
		}
	}
	// x ticks at every whole copy count.
	for x := math.Ceil(xmin); x <= xmax; x++ {
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#e5e5e5"/>`+"\n", f(px(x)), top, f(px(x)), top+plotH)
		fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%d</text>`+"\n", f(px(x)), top+plotH+18, int(x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+plotW/2, height-16, esc(xLabel))
	fmt.Fprintf(&b, `<text x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>`+"\n", top+plotH/2, top+plotH/2, esc(yLabel))

	for i, s := range ss {
		fmt.Fprintf(&b, `<g class="series" data-label="%s">`+"\n", esc(s.label))
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		if len(s.points) > 1 {
			b.WriteString(`<polyline fill="none" stroke-width="2" stroke="` + s.color + `"` + dash + ` points="`)
			for j, p := range s.points {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(f(px(p.x)) + "," + f(py(p.y)))
			}
			b.WriteString(`"/>` + "\n")
		}
		fill := s.color
		if s.hollow {
			fill = "white"
		}
		for _, p := range s.points {
			fmt.Fprintf(&b, `<circle class="pt" cx="%s" cy="%s" r="4" fill="%s" stroke="%s" stroke-width="1.5"><title>%s: %s us at copies=%d</title></circle>`+"\n",
				f(px(p.x)), f(py(p.y)), fill, s.color, esc(s.label), result.FormatValue(p.y), int(p.x))
		}
		// Legend entry.
		ly := top + 10 + 20*i
		lx := left + plotW + 20
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke-width="2" stroke="%s"%s/>`+"\n", lx, ly, lx+30, ly, s.color, dash)
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="4" fill="%s" stroke="%s" stroke-width="1.5"/>`+"\n", lx+15, ly, fill, s.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx+38, ly, esc(s.label))
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// tickLabel renders an axis value: 20, 500, 1k, 20k.
func tickLabel(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
