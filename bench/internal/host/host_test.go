package host

import "testing"

func TestParseCPULine(t *testing.T) {
	idle, total, ok := parseCPULine([]byte("cpu  10 2 3 80 5 0 0 0 0 0\ncpu0 1 1 1 1 1 1 1 1 1 1\n"))
	if !ok || idle != 85 || total != 100 {
		t.Fatalf("got idle %d total %d ok %v, want 85 100 true", idle, total, ok)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5", "cpu 1 2"} {
		if _, _, ok := parseCPULine([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}
