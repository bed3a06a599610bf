/*
 * ulfm_ft: the ULFM side of bench/ft, the peer of bench/ft/rank. It prints
 * the same lines as the Go rank program, so the driver reads both alike.
 * Ranks run on one host, so CLOCK_REALTIME of one process can be compared
 * with another's and with the driver's.
 *
 *   ulfm_ft -mode detect [-victim R]
 *   ulfm_ft -mode coll -iters K -warmup W -rounds R
 *
 * detect: after a barrier the victim (default the last rank) prints
 * "pid <rank> <pid>" and sleeps until the driver's SIGKILL; every other
 * rank prints "ready <rank>" and blocks in MPI_Wait on a receive from
 * MPI_ANY_SOURCE on MPI_COMM_WORLD, which ULFM ends with
 * MPIX_ERR_PROC_FAILED_PENDING once this process knows of a failure (the
 * way a ULFM program learns of one: a blocking call returns an error). It
 * prints "knew <rank> <unixnano>", and "alsofailed <rank> <r1,...>" when
 * MPIX_Comm_get_failed names ranks besides the victim; then the survivors
 * shrink the world, barrier on the result and finalize.
 *
 * coll: no failures. Rank 0 prints
 *
 *   RESULT agree_lat N <ms> ms    median over K consecutive MPIX_Comm_agree
 *   RESULT shrink_lat N <ms> ms   median over K consecutive MPIX_Comm_shrink,
 *                                 each on the previous result
 *
 * after W untimed calls of each (each shrink follows an untimed barrier on
 * the world, as the Go program's does). Then R revoke rounds: each round
 * duplicates the world and barriers on the copy; rank 0 reads the clock,
 * MPIX_Comm_revoke's it and prints "revoke <round> t0 <unixnano>", and
 * every rank (rank 0 too) blocks in MPI_Wait on a receive from
 * MPI_ANY_SOURCE on the copy, which ends with MPIX_ERR_REVOKED once the
 * revocation reached it, and prints "revoke <round> seen <rank>
 * <unixnano>". The driver computes max(seen) - t0 per round.
 *
 * Any unexpected error is printed as "error <rank> <step> <text>" on
 * stdout and the process exits 3.
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef MPIX_ERR_PROC_FAILED
#error "this MPI has no ULFM (MPIX_ERR_PROC_FAILED is not defined in mpi-ext.h)"
#endif

static int me = -1;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fail(const char *step, int rc)
{
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(rc, text, &len);
	for (int i = 0; i < len; i++)
		if (text[i] == '\n')
			text[i] = ' ';
	printf("error %d %s %.*s\n", me, step, len, text);
	fflush(stdout);
	exit(3);
}

static void check(int rc, const char *step)
{
	if (rc != MPI_SUCCESS)
		fail(step, rc);
}

/* wait_error blocks in a receive from anyone on comm that nobody sends and
 * returns the error class that ended it. */
static int wait_error(MPI_Comm comm, const char *step)
{
	MPI_Request req;
	MPI_Status st;
	int buf, rc, eclass;

	check(MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, 4711, comm, &req), step);
	rc = MPI_Wait(&req, &st);
	if (rc == MPI_SUCCESS) {
		printf("error %d %s a receive nobody sent to completed\n", me, step);
		fflush(stdout);
		exit(3);
	}
	MPI_Error_class(rc, &eclass);
	return eclass;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median_ms(double *xs, int n)
{
	qsort(xs, n, sizeof *xs, cmp_double);
	return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

static int detect(int n, int victim)
{
	MPI_Group failed, world_group;
	MPI_Comm shrunk;
	int eclass, nfailed;

	check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
	if (me == victim) {
		printf("pid %d %d\n", me, (int)getpid());
		fflush(stdout);
		for (;;)
			sleep(1); /* until the driver's SIGKILL */
	}
	printf("ready %d\n", me);
	fflush(stdout);
	eclass = wait_error(MPI_COMM_WORLD, "wait");
	if (eclass != MPIX_ERR_PROC_FAILED && eclass != MPIX_ERR_PROC_FAILED_PENDING)
		fail("wait", eclass);
	printf("knew %d %lld\n", me, now_ns());
	fflush(stdout);

	check(MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed), "getfailed");
	check(MPI_Group_size(failed, &nfailed), "groupsize");
	if (nfailed > 1) {
		int *in = malloc(nfailed * sizeof *in), *out = malloc(nfailed * sizeof *out);
		int any = 0;

		check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "group");
		for (int i = 0; i < nfailed; i++)
			in[i] = i;
		check(MPI_Group_translate_ranks(failed, nfailed, in, world_group, out), "translate");
		for (int i = 0; i < nfailed; i++) {
			if (out[i] == victim)
				continue;
			if (!any)
				printf("alsofailed %d %d", me, out[i]);
			else
				printf(",%d", out[i]);
			any = 1;
		}
		if (any)
			printf("\n");
		fflush(stdout);
		MPI_Group_free(&world_group);
		free(in);
		free(out);
	}
	MPI_Group_free(&failed);
	/* Leave together, over the survivors. */
	check(MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk), "shrink");
	MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
	check(MPI_Barrier(shrunk), "leave");
	MPI_Comm_free(&shrunk);
	MPI_Finalize();
	return 0;
}

static unsigned agree_flag(int r, int i) { return ~0u & ~(1u << ((r + i) % 32)); }

static unsigned agree_want(int n, int i)
{
	unsigned v = ~0u;
	for (int r = 0; r < n && r < 32; r++)
		v &= ~(1u << ((r + i) % 32));
	return v;
}

static int coll(int n, int iters, int warmup, int rounds)
{
	double *times = malloc((iters > 0 ? iters : 1) * sizeof *times);
	MPI_Comm cur = MPI_COMM_WORLD, next, fresh;
	long long t0;
	int eclass;

	check(MPI_Barrier(MPI_COMM_WORLD), "barrier");

	for (int i = 0; i < warmup + iters; i++) {
		int flag = (int)agree_flag(me, i);
		t0 = now_ns();
		check(MPIX_Comm_agree(MPI_COMM_WORLD, &flag), "agree");
		if ((unsigned)flag != agree_want(n, i)) {
			printf("error %d agree decided %#x, want %#x\n", me, (unsigned)flag, agree_want(n, i));
			fflush(stdout);
			exit(3);
		}
		if (i >= warmup)
			times[i - warmup] = (now_ns() - t0) / 1e6;
	}
	if (me == 0) {
		printf("RESULT agree_lat %d %.4f ms\n", n, median_ms(times, iters));
		fflush(stdout);
	}

	for (int i = 0; i < warmup + iters; i++) {
		int r, s;

		check(MPI_Barrier(MPI_COMM_WORLD), "shrinkbarrier");
		t0 = now_ns();
		check(MPIX_Comm_shrink(cur, &next), "shrink");
		if (i >= warmup)
			times[i - warmup] = (now_ns() - t0) / 1e6;
		MPI_Comm_set_errhandler(next, MPI_ERRORS_RETURN);
		MPI_Comm_rank(next, &r);
		MPI_Comm_size(next, &s);
		if (r != me || s != n) {
			printf("error %d shrink without failures gave rank %d of %d\n", me, r, s);
			fflush(stdout);
			exit(3);
		}
		/* Kept, as the Go program keeps its communicators. */
		cur = next;
	}
	if (me == 0) {
		printf("RESULT shrink_lat %d %.4f ms\n", n, median_ms(times, iters));
		fflush(stdout);
	}

	for (int round = 0; round < rounds; round++) {
		int rc;

		check(MPI_Comm_dup(MPI_COMM_WORLD, &fresh), "dup");
		MPI_Comm_set_errhandler(fresh, MPI_ERRORS_RETURN);
		/* A rank still in the barrier when rank 0 revokes sees the
		 * revocation there. */
		rc = MPI_Barrier(fresh);
		if (rc != MPI_SUCCESS) {
			MPI_Error_class(rc, &eclass);
			if (eclass != MPIX_ERR_REVOKED)
				fail("revokebarrier", rc);
		}
		if (me == 0) {
			t0 = now_ns();
			check(MPIX_Comm_revoke(fresh), "revoke");
			printf("revoke %d t0 %lld\n", round, t0);
			fflush(stdout);
		}
		eclass = wait_error(fresh, "revokewait");
		if (eclass != MPIX_ERR_REVOKED)
			fail("revokewait", eclass);
		printf("revoke %d seen %d %lld\n", round, me, now_ns());
		fflush(stdout);
		MPI_Comm_free(&fresh);
	}
	free(times);
	check(MPI_Barrier(MPI_COMM_WORLD), "finalbarrier");
	MPI_Finalize();
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = "";
	int victim = -1, iters = 50, warmup = 5, rounds = 5, n;

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc) {
			fprintf(stderr, "ulfm_ft: %s needs a value\n", argv[i]);
			return 2;
		}
		if (strcmp(argv[i], "-mode") == 0)
			mode = argv[++i];
		else if (strcmp(argv[i], "-victim") == 0)
			victim = atoi(argv[++i]);
		else if (strcmp(argv[i], "-iters") == 0)
			iters = atoi(argv[++i]);
		else if (strcmp(argv[i], "-warmup") == 0)
			warmup = atoi(argv[++i]);
		else if (strcmp(argv[i], "-rounds") == 0)
			rounds = atoi(argv[++i]);
		else {
			fprintf(stderr, "ulfm_ft: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (strcmp(mode, "detect") != 0 && strcmp(mode, "coll") != 0) {
		fprintf(stderr, "ulfm_ft: -mode detect or coll\n");
		return 2;
	}
	if (iters < 1 || warmup < 0 || rounds < 1) {
		fprintf(stderr, "ulfm_ft: -iters and -rounds at least 1, -warmup not negative\n");
		return 2;
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (strcmp(mode, "detect") == 0) {
		if (victim < 0)
			victim = n - 1;
		if (n < 2 || victim >= n) {
			printf("error %d detect needs 2 ranks and a victim below %d\n", me, n);
			fflush(stdout);
			MPI_Finalize();
			return 3;
		}
		return detect(n, victim);
	}
	return coll(n, iters, warmup, rounds);
}
