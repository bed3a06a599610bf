package ulfm

import (
	"strings"
	"testing"
	"time"
)

func TestParseInfo(t *testing.T) {
	v4 := "                Open MPI: 4.1.4\n          MPI extensions: affinity, cuda, pcollreq\n   FT Checkpoint support: no (checkpoint thread: no)\n"
	version, ft, ok := ParseInfo(v4)
	if version != "4.1.4" || ok || ft != "MPI extensions: affinity, cuda, pcollreq; FT Checkpoint support: no (checkpoint thread: no)" {
		t.Errorf("4.1.4: got %q %q %v", version, ft, ok)
	}
	v5 := "                Open MPI: 5.0.3\n          MPI extensions: affinity, cuda, ftmpi, rocm, shortfloat\n Fault Tolerance support: yes\n          FT MPI support: yes\n"
	version, _, ok = ParseInfo(v5)
	if version != "5.0.3" || !ok {
		t.Errorf("5.0.3: got %q %v", version, ok)
	}
	version, _, ok = ParseInfo(strings.Replace(v5, "FT MPI support: yes", "FT MPI support: no", 1))
	if version != "5.0.3" || ok {
		t.Errorf("5.0.3 without ULFM: got %q %v", version, ok)
	}
}

func TestArgv(t *testing.T) {
	m := MPI{Mpirun: "/o/bin/mpirun"}
	got := strings.Join(m.Argv("/t/ulfm_replace", "tcp", 8), " ")
	want := "/o/bin/mpirun --allow-run-as-root --oversubscribe --with-ft ulfm --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo -n 8 /t/ulfm_replace"
	if got != want {
		t.Errorf("tcp:\n got %s\nwant %s", got, want)
	}
	got = strings.Join(m.Argv("b", "shm", 4, "-map-by", ":OVERSUBSCRIBE"), " ")
	want = "/o/bin/mpirun --allow-run-as-root --oversubscribe --with-ft ulfm --mca pml ob1 --mca btl self,sm,tcp --mca btl_tcp_if_include lo -n 4 b -map-by :OVERSUBSCRIBE"
	if got != want {
		t.Errorf("shm:\n got %s\nwant %s", got, want)
	}
}

func TestWithMCA(t *testing.T) {
	m := MPI{Mpirun: "mpirun"}
	got := strings.Join(WithMCA(m.Argv("b", "tcp", 4, "-mode", "detect"), Detector(25*time.Millisecond, 120*time.Millisecond)...), " ")
	want := "mpirun --allow-run-as-root --oversubscribe --with-ft ulfm --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo " +
		"--mca mpi_ft_detector true --mca mpi_ft_detector_period 0.025 --mca mpi_ft_detector_timeout 0.12 -n 4 b -mode detect"
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}
