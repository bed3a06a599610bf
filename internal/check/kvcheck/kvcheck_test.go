package kvcheck

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func op(client int, in Input, out Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

// The model accepts a linearizable history and rejects a stale read, per
// key, and a compare-and-swap of unknown outcome may have happened or not.
func TestModel(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		want bool // linearizable
	}{
		{"put then get", []porcupine.Operation{
			op(0, Input{Kind: "put", Key: 1, Value: "a"}, Output{}, 0, 10),
			op(1, Input{Kind: "get", Key: 1}, Output{Value: "a"}, 20, 30),
		}, true},
		{"stale read", []porcupine.Operation{
			op(0, Input{Kind: "put", Key: 1, Value: "a"}, Output{}, 0, 10),
			op(0, Input{Kind: "put", Key: 1, Value: "b"}, Output{}, 20, 30),
			op(1, Input{Kind: "get", Key: 1}, Output{Value: "a"}, 40, 50),
		}, false},
		{"keys are separate", []porcupine.Operation{
			op(0, Input{Kind: "put", Key: 1, Value: "a"}, Output{}, 0, 10),
			op(1, Input{Kind: "get", Key: 2}, Output{}, 20, 30),
		}, true},
		{"delete", []porcupine.Operation{
			op(0, Input{Kind: "put", Key: 1, Value: "a"}, Output{}, 0, 10),
			op(0, Input{Kind: "del", Key: 1}, Output{}, 20, 30),
			op(1, Input{Kind: "get", Key: 1}, Output{Value: "a"}, 40, 50),
		}, false},
		{"cas that could not swap did", []porcupine.Operation{
			op(0, Input{Kind: "cas", Key: 1, Old: "x", Value: "y"}, Output{Swapped: true}, 0, 10),
		}, false},
		{"cas of unknown outcome", []porcupine.Operation{
			op(0, Input{Kind: "cas", Key: 1, Old: "", Value: "y"}, Output{Unknown: true}, 0, 1<<62),
			op(1, Input{Kind: "get", Key: 1}, Output{Value: "y"}, 20, 30),
		}, true},
	} {
		if got := porcupine.CheckOperations(Model, c.ops); got != c.want {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.want)
		}
	}
}
