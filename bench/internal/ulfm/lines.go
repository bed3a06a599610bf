package ulfm

import (
	"strconv"
	"strings"
)

// The benchmarks' rank programs (ftrma's and the MPI ones) report by lines
// of fields, a keyword and then numbers mostly. These are what both
// drivers' parsers read them with.

// Fields splits line into its fields, without the "[rank]" tag that
// ftrun's --tag-output puts first.
func Fields(line string) []string {
	f := strings.Fields(line)
	if len(f) > 0 && strings.HasPrefix(f[0], "[") && strings.HasSuffix(f[0], "]") {
		f = f[1:]
	}
	return f
}

// Nat parses a field that must be a natural number (0 included).
func Nat(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0
}

// Nats parses fields that must all be natural numbers.
func Nats(f []string) ([]int64, bool) {
	v := make([]int64, len(f))
	for i, s := range f {
		var ok bool
		if v[i], ok = Nat(s); !ok {
			return nil, false
		}
	}
	return v, true
}
