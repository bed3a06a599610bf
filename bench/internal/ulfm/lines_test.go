package ulfm

import (
	"slices"
	"testing"
)

func TestLines(t *testing.T) {
	if f := Fields("[3] pid 3 4711"); !slices.Equal(f, []string{"pid", "3", "4711"}) {
		t.Errorf("Fields = %q", f)
	}
	if f := Fields("ready 2"); !slices.Equal(f, []string{"ready", "2"}) {
		t.Errorf("Fields = %q", f)
	}
	if v, ok := Nats([]string{"0", "12", "9007199254740993"}); !ok || !slices.Equal(v, []int64{0, 12, 9007199254740993}) {
		t.Errorf("Nats = %v, %v", v, ok)
	}
	for _, bad := range [][]string{{"-1"}, {"1", "x"}, {"1.5"}} {
		if _, ok := Nats(bad); ok {
			t.Errorf("Nats(%q) succeeded", bad)
		}
	}
}
