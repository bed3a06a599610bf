package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ftrma/ftrma/bench/internal/ulfm"
)

// ulfmSource is the ULFM side's program: it prints the same lines as
// bench/ft/rank, so that one parser reads both.
//
//go:embed mpi/ulfm_ft.c
var ulfmSource []byte

// system is one column of the table: ftrma under ftrun, or its peer, ULFM
// (Open MPI 5) under mpirun. Each runs a program that prints the lines of
// bench/ft/rank (parse.go).
type system struct {
	name string
	// argv is the command of a failure-free job of n processes (mode coll)
	// or of one whose last rank the driver kills (mode detect) or stops
	// (mode stop: the program's detect mode, with a failure detector that
	// declares a hung process), with the mode's arguments.
	argv func(n int, mode string, args ...string) []string
	// mpirun: the job's launcher is mpirun, not ftrun (see runJob).
	mpirun bool
}

// ftrmaSystem runs the jobs under ftrun with bench/ft/rank.
func ftrmaSystem(o options, bins binaries) system {
	return system{name: sysFtrma, argv: func(n int, mode string, args ...string) []string {
		if mode == "stop" {
			mode = "detect" // ftrun's detector is always on
		}
		rankArgs := append([]string{"-mode", mode}, args...)
		if mode == "detect" {
			rankArgs = append(rankArgs, "-wait", o.timeout.String())
		}
		return ftrunArgs(o, bins, n, rankArgs...)
	}}
}

// ulfmSystem finds (or, at the default prefix, installs) Open MPI 5 with
// ULFM and builds mpi/ulfm_ft.c with it into dir; its jobs run over the
// same transport as ftrma's (ulfm.MPI.Argv: btl self,tcp or self,sm,tcp).
func ulfmSystem(ctx context.Context, o options, dir string) (system, string, error) {
	var mpi ulfm.MPI
	var err error
	if o.ulfm == ulfm.DefaultPrefix {
		mpi, err = ulfm.FindOrInstall(ctx, o.ulfm, os.Stderr)
	} else {
		mpi, err = ulfm.Find(ctx, o.ulfm)
	}
	if err != nil {
		return system{}, "", err
	}
	bin := filepath.Join(dir, "ulfm_ft")
	if err := mpi.Compile(ctx, ulfmSource, bin); err != nil {
		return system{}, "", err
	}
	s := system{name: "ulfm-" + o.transport, mpirun: true, argv: func(n int, mode string, args ...string) []string {
		if mode == "stop" {
			// ULFM's heartbeat detector, off by default, with ftrma's
			// timeout for this job and a quarter of it as the period
			// (Open MPI wants the timeout above three periods).
			timeout := o.timeoutFor(n)
			argv := mpi.Argv(bin, o.transport, n, append([]string{"-mode", "detect"}, args...)...)
			return ulfm.WithMCA(argv, ulfm.Detector(timeout/4, timeout)...)
		}
		return mpi.Argv(bin, o.transport, n, append([]string{"-mode", mode}, args...)...)
	}}
	about := fmt.Sprintf("Open MPI %s with ULFM (%s), mpirun --with-ft ulfm, %s", mpi.Version, mpi.Prefix, "btl "+ulfm.BTL(o.transport))
	return s, about, nil
}

// collArgs are the arguments of a coll job, the same for both systems.
func collArgs(o options) []string {
	return []string{"-iters", strconv.Itoa(o.iters), "-warmup", strconv.Itoa(o.warmup), "-rounds", strconv.Itoa(o.revokeRounds)}
}
