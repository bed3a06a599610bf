// Package kvcheck is the model against which the store's histories are
// checked for linearizability with github.com/anishathalye/porcupine: a
// register per key (initially absent) with put, delete, compare-and-swap and
// get. The e2e suite checks histories that ranks of real jobs record, the
// store's own tests histories recorded in one process; both describe each
// operation with an Input and an Output and check them against Model.
package kvcheck

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// Input is one store operation as called.
type Input struct {
	Kind  string // "put", "del", "get" or "cas"
	Key   int
	Value string // put: the value; cas: the new value
	Old   string // cas: the value expected, "" for absent
}

// Output is what the operation returned.
type Output struct {
	Value   string // get: the value read, "" when not found
	Swapped bool   // cas: it swapped
	// Unknown marks a write whose outcome is not known (it returned an
	// error, or never returned): it may or may not have taken effect.
	Unknown bool
}

// Model is a register per key whose initial state is "not found" (""). A
// compare-and-swap of unknown outcome is assumed to have swapped when it
// could: porcupine may place it at the history's end, where it is not
// observed.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(Input).Key
			by[k] = append(by[k], op)
		}
		keys := make([]int, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the same order at every call
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(Input), output.(Output)
		switch in.Kind {
		case "put":
			return true, in.Value
		case "del":
			return true, ""
		case "cas":
			if in.Old == state.(string) {
				return out.Unknown || out.Swapped, in.Value
			}
			return out.Unknown || !out.Swapped, state
		}
		return out.Value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch in.Kind {
		case "get":
			return fmt.Sprintf("get(%d) -> %q", in.Key, out.Value)
		case "cas":
			return fmt.Sprintf("cas(%d, %q, %q) -> %v", in.Key, in.Old, in.Value, out.Swapped)
		}
		return fmt.Sprintf("%s(%d, %q)", in.Kind, in.Key, in.Value)
	},
}
