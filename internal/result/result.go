// Package result holds what every benchmark (bench/, cmd/ftkv) shares: the result
// record, the line format that rank programs print, the median over rounds,
// and the table and JSON writers.
//
// A benchmark driver uses it in four steps:
//
//  1. Run each system once per round, interleaved (A, B, A, B, ...).
//  2. Parse every output line with ParseLine and Add the results to a Set,
//     setting System to the system that produced them.
//  3. Take Set.Medians: one Result per (bench, size, copies, system).
//  4. Print them with WriteTable and save them with WriteJSON.
//
// The JSON file is an array of objects
//
//	{"bench": "put_lat", "size": 8, "system": "ftrma-tcp", "value": 3.91, "unit": "us"}
//
// with an optional "copies" field (replication factor) for benchmarks that
// have one, such as bench/store and bench/ft.
package result

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Result is one measured value of one system.
type Result struct {
	// Bench names what was measured, e.g. "put_lat".
	Bench string `json:"bench"`
	// Size is the message size in bytes.
	Size int `json:"size"`
	// Copies is the number of replicas, for benchmarks that have such a
	// parameter; 0 means "not applicable" and is left out of the JSON.
	Copies int `json:"copies,omitempty"`
	// System names the system measured, e.g. "ftrma-tcp" or "openmpi-tcp".
	System string `json:"system"`
	// Value is the measurement in Unit.
	Value float64 `json:"value"`
	// Unit is the unit of Value, e.g. "us" or "ops/s".
	Unit string `json:"unit"`
}

// Key identifies a measured quantity independent of the system: one table row.
type Key struct {
	Bench  string
	Size   int
	Copies int
}

// Key returns r's row key.
func (r Result) Key() Key { return Key{Bench: r.Bench, Size: r.Size, Copies: r.Copies} }

// validate reports a result that cannot be written or compared meaningfully.
func (r Result) validate() error {
	switch {
	case r.Bench == "":
		return errors.New("result: empty bench")
	case r.System == "":
		return fmt.Errorf("result: %s %d: empty system", r.Bench, r.Size)
	case r.Unit == "":
		return fmt.Errorf("result: %s %d: empty unit", r.Bench, r.Size)
	case r.Size < 0 || r.Copies < 0:
		return fmt.Errorf("result: %s: negative size or copies", r.Bench)
	case math.IsNaN(r.Value) || math.IsInf(r.Value, 0):
		return fmt.Errorf("result: %s %d: value %v", r.Bench, r.Size, r.Value)
	}
	return nil
}

// LinePrefix starts every result line that a benchmark program prints.
const LinePrefix = "RESULT"

// FormatLine renders r (without its System, which the driver knows) as a
// result line:
//
//	RESULT <bench> <size> <value> <unit> [copies=<n>]
func FormatLine(r Result) string {
	s := fmt.Sprintf("%s %s %d %s %s", LinePrefix, r.Bench, r.Size,
		strconv.FormatFloat(r.Value, 'f', -1, 64), r.Unit)
	if r.Copies != 0 {
		s += fmt.Sprintf(" copies=%d", r.Copies)
	}
	return s
}

// ParseLine parses a result line printed by a benchmark program. Text before
// "RESULT " (a launcher's rank prefix, say) is ignored. ok is false for a line
// that holds no result; err is set for a result line that is malformed. The
// returned Result has an empty System.
func ParseLine(line string) (r Result, ok bool, err error) {
	i := strings.Index(line, LinePrefix+" ")
	if i < 0 {
		return Result{}, false, nil
	}
	f := strings.Fields(line[i+len(LinePrefix):])
	if len(f) < 4 || len(f) > 5 {
		return Result{}, false, fmt.Errorf("result line %q: want bench size value unit [copies=N]", line)
	}
	r.Bench, r.Unit = f[0], f[3]
	if r.Size, err = strconv.Atoi(f[1]); err != nil || r.Size < 0 {
		return Result{}, false, fmt.Errorf("result line %q: bad size", line)
	}
	if r.Value, err = strconv.ParseFloat(f[2], 64); err != nil || math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return Result{}, false, fmt.Errorf("result line %q: bad value", line)
	}
	if len(f) == 5 {
		n, found := strings.CutPrefix(f[4], "copies=")
		if !found {
			return Result{}, false, fmt.Errorf("result line %q: unknown field %q", line, f[4])
		}
		if r.Copies, err = strconv.Atoi(n); err != nil || r.Copies <= 0 {
			return Result{}, false, fmt.Errorf("result line %q: bad copies", line)
		}
	}
	return r, true, nil
}

// Median returns the median of xs (the mean of the two middle values when
// len(xs) is even), or NaN when xs is empty. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile returns the p-th percentile of xs, 0 <= p <= 100, by linear
// interpolation between the two nearest ranks (the "type 7" estimate of R
// and NumPy's default): the minimum for p = 0, the maximum for p = 100, and
// Median for p = 50. It returns NaN when xs is empty or p is out of range.
// With few samples a high percentile lies between the two largest samples;
// p99 of five samples is 0.04 of the way from the fourth to the fifth. xs is
// not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || !(p >= 0 && p <= 100) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	frac := pos - float64(lo)
	return s[lo] + frac*(s[lo+1]-s[lo])
}

// seriesKey names one series of samples: one row, one system.
type seriesKey struct {
	Key
	System string
}

type series struct {
	unit   string
	values []float64
}

// Set collects samples over rounds. The zero value is ready to use. A Set is
// not safe for concurrent use.
type Set struct {
	order  []seriesKey // first-seen order; invariant: the keys of byKey
	byKey  map[seriesKey]*series
	failed map[string]int // runs that failed, by system
}

// Add records one sample. It rejects a result without bench, system or unit,
// and one whose unit differs from earlier samples of the same series.
func (s *Set) Add(r Result) error {
	if err := r.validate(); err != nil {
		return err
	}
	k := seriesKey{r.Key(), r.System}
	if s.byKey == nil {
		s.byKey = make(map[seriesKey]*series)
	}
	ser, found := s.byKey[k]
	if !found {
		ser = &series{unit: r.Unit}
		s.byKey[k] = ser
		s.order = append(s.order, k)
	}
	if ser.unit != r.Unit {
		return fmt.Errorf("result: %s %d %s: unit %q, earlier %q", r.Bench, r.Size, r.System, r.Unit, ser.unit)
	}
	ser.values = append(ser.values, r.Value)
	return nil
}

// AddFailure counts a run of system that produced no usable results.
func (s *Set) AddFailure(system string) {
	if s.failed == nil {
		s.failed = make(map[string]int)
	}
	s.failed[system]++
}

// Failures returns how many runs of system failed.
func (s *Set) Failures(system string) int { return s.failed[system] }

// Samples returns the samples recorded for one series, in the order added.
func (s *Set) Samples(k Key, system string) []float64 {
	if ser := s.byKey[seriesKey{k, system}]; ser != nil {
		return slices.Clone(ser.values)
	}
	return nil
}

// Medians returns, for every series, a Result holding the median of its
// samples, in the order the series were first added.
func (s *Set) Medians() []Result {
	out := make([]Result, 0, len(s.order))
	for _, k := range s.order {
		ser := s.byKey[k]
		out = append(out, Result{
			Bench: k.Bench, Size: k.Size, Copies: k.Copies, System: k.System,
			Value: Median(ser.values), Unit: ser.unit,
		})
	}
	return out
}

// WriteJSON writes rs as an indented JSON array.
func WriteJSON(w io.Writer, rs []Result) error {
	for _, r := range rs {
		if err := r.validate(); err != nil {
			return err
		}
	}
	if rs == nil {
		rs = []Result{} // "[]", not "null"
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Finish is a benchmark driver's last step: it writes rs to jsonPath when
// that is set, and returns the driver's exit status: 1 when ctx ended
// (interrupted), no result came or the file could not be written; 3 when
// missing results were reported; else 0. name prefixes its messages.
func Finish(ctx context.Context, name, jsonPath string, rs []Result, missing int) int {
	if jsonPath != "" {
		if err := WriteJSONFile(jsonPath, rs); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			return 1
		}
		fmt.Printf("wrote %d results to %s\n", len(rs), jsonPath)
	}
	switch {
	case ctx.Err() != nil:
		fmt.Println("interrupted")
		return 1
	case len(rs) == 0:
		return 1
	case missing > 0:
		return 3
	}
	return 0
}

// WriteJSONFile writes rs to the file at path, replacing it.
func WriteJSONFile(path string, rs []Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	err = WriteJSON(bw, rs)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadJSON reads a JSON array written by WriteJSON and checks every entry.
func ReadJSON(r io.Reader) ([]Result, error) {
	var rs []Result
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rs); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	if rs == nil {
		return nil, errors.New("result: JSON is not an array")
	}
	for i, x := range rs {
		if err := x.validate(); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return rs, nil
}

// FormatValue renders v for a table: two decimals for small values, none
// (with thousands kept whole) for large ones.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 10000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
