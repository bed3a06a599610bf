/*
 * ulfm_replace: the ULFM side of bench/ulfm.
 *
 * N ranks start under mpirun --with-ft ulfm. After a barrier, the last rank
 * (the victim) prints its pid and sleeps; the others print "ready" and enter
 * a second barrier on MPI_COMM_WORLD, which cannot complete. The driver
 * SIGKILLs the victim. Each survivor then:
 *
 *   1. sees its barrier fail (MPIX_ERR_PROC_FAILED, or MPIX_ERR_REVOKED when
 *      another survivor revoked first) and revokes MPI_COMM_WORLD;
 *   2. MPIX_Comm_shrink(MPI_COMM_WORLD) -> shrunk (N-1 ranks);
 *   3. MPI_Comm_spawn of one new process running this program, root 0 of
 *      shrunk -> an intercommunicator;
 *   4. MPI_Intercomm_merge (survivors low, the new process high);
 *   5. MPI_Comm_split with key = old rank (the new process: the dead rank),
 *      so that the new process takes the dead rank's number, as ftrma's
 *      Replace does.
 *
 * The new process does MPI_Init, MPI_Comm_get_parent, the merge and the
 * split. Every process notes CLOCK_REALTIME (ns since 1970) after each step:
 *
 *   pid <rank> <pid>                       the victim, ready to be killed
 *   ready <rank>                           a survivor, about to block
 *   at old <rank> <step> <unixnano>        a survivor's step returned:
 *                                          knew, shrink, spawn, merge, full
 *   at new <rank> <step> <unixnano>        the new process (rank: the one it
 *                                          replaces): main, init, merge, full
 *   check <old|new> <rank> <newrank> <size> <sum>
 *                                          after full: its rank and the size
 *                                          of the final communicator, and an
 *                                          allreduce of the ranks over it
 *   error <old|new> <rank> <step> <text>   a call failed; the process exits 3
 *
 * "full" is when the full-size communicator exists at that process. The
 * driver computes kill -> the last full. Usage:
 *
 *   ulfm_replace [-map-by VALUE]           a rank of the job
 *   ulfm_replace -replace RANK [...]       the new process (spawned)
 *
 * -map-by is passed to MPI_Comm_spawn as the info key map_by.
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef MPIX_ERR_PROC_FAILED
#error "this MPI has no ULFM (MPIX_ERR_PROC_FAILED is not defined in mpi-ext.h)"
#endif

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char *role = "old";
static int me = -1; /* old rank, or the rank the new process replaces */

static void at(const char *step)
{
	long long t = now_ns();
	printf("at %s %d %s %lld\n", role, me, step, t);
	fflush(stdout);
}

static void check(int rc, const char *step)
{
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return;
	MPI_Error_string(rc, text, &len);
	for (int i = 0; i < len; i++)
		if (text[i] == '\n')
			text[i] = ' ';
	printf("error %s %d %s %.*s\n", role, me, step, len, text);
	fflush(stdout);
	exit(3);
}

/* finish splits merged so that each process gets rank key, notes "full",
 * checks the result with an allreduce and finalizes. */
static int finish(MPI_Comm merged, int key)
{
	MPI_Comm full;
	int rank, size, sum = 0;

	check(MPI_Comm_split(merged, 0, key, &full), "split");
	at("full");
	check(MPI_Comm_rank(full, &rank), "rank");
	check(MPI_Comm_size(full, &size), "size");
	check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, full), "allreduce");
	printf("check %s %d %d %d %d\n", role, me, rank, size, sum);
	fflush(stdout);
	MPI_Comm_free(&full);
	MPI_Comm_free(&merged);
	MPI_Finalize();
	return 0;
}

static int new_process(int replaces)
{
	MPI_Comm parent, merged;

	role = "new";
	me = replaces;
	at("main");
	MPI_Init(NULL, NULL);
	at("init");
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	check(MPI_Comm_get_parent(&parent), "parent");
	if (parent == MPI_COMM_NULL) {
		printf("error new %d parent no parent communicator: run by the survivors' MPI_Comm_spawn only\n", me);
		fflush(stdout);
		MPI_Finalize();
		return 3;
	}
	MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
	check(MPI_Intercomm_merge(parent, 1, &merged), "merge");
	at("merge");
	return finish(merged, replaces);
}

int main(int argc, char **argv)
{
	const char *map_by = NULL;
	int replaces = -1;
	int n, rc, eclass;
	MPI_Comm shrunk, inter, merged;
	MPI_Info info;
	char self[4096], victim[16];
	char *child_argv[5];
	ssize_t len;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-replace") == 0 && i + 1 < argc)
			replaces = atoi(argv[++i]);
		else if (strcmp(argv[i], "-map-by") == 0 && i + 1 < argc)
			map_by = argv[++i];
		else {
			fprintf(stderr, "ulfm_replace: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (replaces >= 0)
		return new_process(replaces);

	MPI_Init(&argc, &argv);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	check(MPI_Barrier(MPI_COMM_WORLD), "startbarrier");

	if (me == n - 1) {
		printf("pid %d %d\n", me, (int)getpid());
		fflush(stdout);
		for (;;)
			sleep(1); /* until the driver's SIGKILL */
	}
	printf("ready %d\n", me);
	fflush(stdout);

	rc = MPI_Barrier(MPI_COMM_WORLD);
	if (rc == MPI_SUCCESS) {
		printf("error old %d knew the barrier completed without the victim\n", me);
		fflush(stdout);
		exit(3);
	}
	MPI_Error_class(rc, &eclass);
	if (eclass != MPIX_ERR_PROC_FAILED && eclass != MPIX_ERR_REVOKED)
		check(rc, "knew");
	at("knew");
	MPIX_Comm_revoke(MPI_COMM_WORLD);

	check(MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk), "shrink");
	at("shrink");
	MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);

	len = readlink("/proc/self/exe", self, sizeof self - 1);
	if (len < 0) {
		printf("error old %d spawn readlink /proc/self/exe: %s\n", me, strerror(errno));
		fflush(stdout);
		exit(3);
	}
	self[len] = '\0';
	snprintf(victim, sizeof victim, "%d", n - 1);
	child_argv[0] = "-replace";
	child_argv[1] = victim;
	child_argv[2] = NULL;
	MPI_Info_create(&info);
	if (map_by != NULL)
		MPI_Info_set(info, "map_by", map_by);
	check(MPI_Comm_spawn(self, child_argv, 1, info, 0, shrunk, &inter, MPI_ERRCODES_IGNORE), "spawn");
	at("spawn");
	MPI_Info_free(&info);
	MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);

	check(MPI_Intercomm_merge(inter, 0, &merged), "merge");
	at("merge");
	MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
	return finish(merged, me);
}
