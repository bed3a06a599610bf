/*
 * rma_bench: the Open MPI side of bench/rma.
 *
 * Two ranks. Rank 1 is the passive target: it allocates the window memory and
 * then waits in MPI_Barrier (which drives MPI progress) while rank 0, the
 * origin, measures. The benchmarks mirror bench/rma/rank (the ftrma side);
 * the driver passes both programs the same plan on the command line:
 *
 *   -lat SIZE:ITERS:WARMUP[,...]   put_lat and get_lat for each size
 *   -atomic ITERS:WARMUP           cas_lat and fadd_lat (8-byte int64)
 *   -lock ITERS:WARMUP             lock_lat (exclusive lock + unlock, no ops)
 *   -rate SIZE:WINDOW:BATCHES:WARMUP  put_rate: WINDOW puts, one flush, per batch
 *
 * An omitted flag skips that benchmark. Results are printed by rank 0, one per
 * line, as
 *
 *   RESULT <bench> <size> <value> <unit>
 *
 * Latencies are the mean over the timed iterations in microseconds; the rate
 * is operations per second.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

struct lat_plan {
	int n;
	long size[MAX_SIZES];
	long iters[MAX_SIZES];
	long warmup[MAX_SIZES];
};

struct plan {
	struct lat_plan lat;
	int have_atomic;
	long atomic_iters, atomic_warmup;
	int have_lock;
	long lock_iters, lock_warmup;
	int have_rate;
	long rate_size, rate_window, rate_batches, rate_warmup;
};

static void die(const char *msg)
{
	fprintf(stderr, "rma_bench: %s\n", msg);
	MPI_Abort(MPI_COMM_WORLD, 2);
	exit(2);
}

static void parse_lat(const char *arg, struct lat_plan *lp)
{
	char *copy = strdup(arg);
	char *save = NULL;
	char *tok;

	if (copy == NULL)
		die("out of memory");
	lp->n = 0;
	for (tok = strtok_r(copy, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		long s, i, w;
		if (lp->n == MAX_SIZES)
			die("too many sizes in -lat");
		if (sscanf(tok, "%ld:%ld:%ld", &s, &i, &w) != 3 || s <= 0 ||
		    i <= 0 || w < 0)
			die("bad -lat entry, want SIZE:ITERS:WARMUP");
		lp->size[lp->n] = s;
		lp->iters[lp->n] = i;
		lp->warmup[lp->n] = w;
		lp->n++;
	}
	free(copy);
}

static void parse_args(int argc, char **argv, struct plan *p)
{
	int i;

	memset(p, 0, sizeof(*p));
	for (i = 1; i < argc; i++) {
		const char *val = (i + 1 < argc) ? argv[i + 1] : NULL;
		if (strcmp(argv[i], "-lat") == 0 && val != NULL) {
			parse_lat(val, &p->lat);
		} else if (strcmp(argv[i], "-atomic") == 0 && val != NULL) {
			if (sscanf(val, "%ld:%ld", &p->atomic_iters,
				   &p->atomic_warmup) != 2 ||
			    p->atomic_iters <= 0 || p->atomic_warmup < 0)
				die("bad -atomic, want ITERS:WARMUP");
			p->have_atomic = 1;
		} else if (strcmp(argv[i], "-lock") == 0 && val != NULL) {
			if (sscanf(val, "%ld:%ld", &p->lock_iters,
				   &p->lock_warmup) != 2 ||
			    p->lock_iters <= 0 || p->lock_warmup < 0)
				die("bad -lock, want ITERS:WARMUP");
			p->have_lock = 1;
		} else if (strcmp(argv[i], "-rate") == 0 && val != NULL) {
			if (sscanf(val, "%ld:%ld:%ld:%ld", &p->rate_size,
				   &p->rate_window, &p->rate_batches,
				   &p->rate_warmup) != 4 ||
			    p->rate_size <= 0 || p->rate_window <= 0 ||
			    p->rate_batches <= 0 || p->rate_warmup < 0)
				die("bad -rate, want SIZE:WINDOW:BATCHES:WARMUP");
			p->have_rate = 1;
		} else {
			die("usage: rma_bench [-lat S:I:W,...] [-atomic I:W] "
			    "[-lock I:W] [-rate S:WIN:B:W]");
		}
		i++;
	}
}

/* window_bytes is how much memory the target must expose for the plan. */
static long window_bytes(const struct plan *p)
{
	long n = 8;
	int i;

	for (i = 0; i < p->lat.n; i++)
		if (p->lat.size[i] > n)
			n = p->lat.size[i];
	if (p->have_rate && p->rate_size * p->rate_window > n)
		n = p->rate_size * p->rate_window;
	return n;
}

static void report(const char *bench, long size, double value,
		   const char *unit)
{
	if (strcmp(unit, "us") == 0)
		printf("RESULT %s %ld %.3f %s\n", bench, size, value, unit);
	else
		printf("RESULT %s %ld %.1f %s\n", bench, size, value, unit);
	fflush(stdout);
}

/* check_put_get makes sure that data really moves before anything is timed. */
static void check_put_get(MPI_Win win)
{
	char want[8] = "mpi-ok!", got[8] = {0};

	MPI_Put(want, 8, MPI_BYTE, 1, 0, 8, MPI_BYTE, win);
	MPI_Win_flush(1, win);
	MPI_Get(got, 8, MPI_BYTE, 1, 0, 8, MPI_BYTE, win);
	MPI_Win_flush(1, win);
	if (memcmp(want, got, 8) != 0)
		die("check: put data did not come back from get");
}

static void bench_put_get(MPI_Win win, char *buf, const struct lat_plan *lp)
{
	int k;
	long i;

	for (k = 0; k < lp->n; k++) {
		int size = (int)lp->size[k];
		double t0 = 0;
		for (i = 0; i < lp->warmup[k] + lp->iters[k]; i++) {
			if (i == lp->warmup[k])
				t0 = MPI_Wtime();
			MPI_Put(buf, size, MPI_BYTE, 1, 0, size, MPI_BYTE, win);
			MPI_Win_flush(1, win);
		}
		report("put_lat", size,
		       (MPI_Wtime() - t0) * 1e6 / (double)lp->iters[k], "us");
	}
	for (k = 0; k < lp->n; k++) {
		int size = (int)lp->size[k];
		double t0 = 0;
		for (i = 0; i < lp->warmup[k] + lp->iters[k]; i++) {
			if (i == lp->warmup[k])
				t0 = MPI_Wtime();
			MPI_Get(buf, size, MPI_BYTE, 1, 0, size, MPI_BYTE, win);
			MPI_Win_flush(1, win);
		}
		report("get_lat", size,
		       (MPI_Wtime() - t0) * 1e6 / (double)lp->iters[k], "us");
	}
}

static void bench_atomics(MPI_Win win, long iters, long warmup)
{
	int64_t cmp, swp, res, start, zero = 0, one = 1;
	double t0 = 0, t1;
	long i;

	/* Read the word (earlier puts wrote it); each CAS then expects the
	 * value the previous one stored, so every CAS succeeds and changes
	 * memory. */
	MPI_Fetch_and_op(&zero, &start, MPI_INT64_T, 1, 0, MPI_SUM, win);
	MPI_Win_flush(1, win);
	for (i = 0; i < warmup + iters; i++) {
		if (i == warmup)
			t0 = MPI_Wtime();
		cmp = start + (int64_t)i;
		swp = start + (int64_t)i + 1;
		MPI_Compare_and_swap(&swp, &cmp, &res, MPI_INT64_T, 1, 0, win);
		MPI_Win_flush(1, win);
	}
	t1 = MPI_Wtime();
	if (res != start + warmup + iters - 1)
		die("check: last compare-and-swap did not succeed");
	report("cas_lat", 8, (t1 - t0) * 1e6 / (double)iters, "us");

	start += warmup + iters;

	for (i = 0; i < warmup + iters; i++) {
		if (i == warmup)
			t0 = MPI_Wtime();
		MPI_Fetch_and_op(&one, &res, MPI_INT64_T, 1, 0, MPI_SUM, win);
		MPI_Win_flush(1, win);
	}
	t1 = MPI_Wtime();
	if (res != start + warmup + iters - 1)
		die("check: last fetch-and-add found a wrong value");
	report("fadd_lat", 8, (t1 - t0) * 1e6 / (double)iters, "us");
}

static void bench_rate(MPI_Win win, char *buf, const struct plan *p)
{
	int size = (int)p->rate_size;
	double t0 = 0;
	long b, j;

	for (b = 0; b < p->rate_warmup + p->rate_batches; b++) {
		if (b == p->rate_warmup)
			t0 = MPI_Wtime();
		for (j = 0; j < p->rate_window; j++)
			MPI_Put(buf + j * size, size, MPI_BYTE, 1,
				(MPI_Aint)(j * size), size, MPI_BYTE, win);
		MPI_Win_flush(1, win);
	}
	report("put_rate", size,
	       (double)(p->rate_batches * p->rate_window) /
		       (MPI_Wtime() - t0),
	       "ops/s");
}

static void bench_lock(MPI_Win win, long iters, long warmup)
{
	double t0 = 0;
	long i;

	for (i = 0; i < warmup + iters; i++) {
		if (i == warmup)
			t0 = MPI_Wtime();
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
		MPI_Win_unlock(1, win);
	}
	report("lock_lat", 8, (MPI_Wtime() - t0) * 1e6 / (double)iters, "us");
}

int main(int argc, char **argv)
{
	struct plan p;
	int rank, size;
	long bytes;
	char *buf = NULL;
	void *base = NULL;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2)
		die("needs exactly 2 ranks");
	parse_args(argc, argv, &p);
	bytes = window_bytes(&p);

	/* Only the target exposes memory; the origin's buffer is private. */
	MPI_Win_allocate(rank == 1 ? (MPI_Aint)bytes : 0, 1, MPI_INFO_NULL,
			 MPI_COMM_WORLD, &base, &win);
	if (rank == 1) {
		memset(base, 0, (size_t)bytes);
	} else {
		buf = malloc((size_t)bytes);
		if (buf == NULL)
			die("out of memory");
		memset(buf, 'a', (size_t)bytes);
	}
	MPI_Barrier(MPI_COMM_WORLD);

	/* Phase 1: the origin holds a shared lock on every rank (lock_all),
	 * as an ftrma window does from birth. */
	if (rank == 0) {
		MPI_Win_lock_all(0, win);
		check_put_get(win);
		bench_put_get(win, buf, &p.lat);
		if (p.have_atomic)
			bench_atomics(win, p.atomic_iters, p.atomic_warmup);
		if (p.have_rate)
			bench_rate(win, buf, &p);
		MPI_Win_unlock_all(win);
	}
	MPI_Barrier(MPI_COMM_WORLD);

	/* Phase 2: no lock_all epoch; exclusive lock/unlock of the target. */
	if (rank == 0 && p.have_lock)
		bench_lock(win, p.lock_iters, p.lock_warmup);
	MPI_Barrier(MPI_COMM_WORLD);

	MPI_Win_free(&win);
	free(buf);
	MPI_Finalize();
	return 0;
}
