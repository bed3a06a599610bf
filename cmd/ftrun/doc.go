// Command ftrun starts an ftrma job: N ranks of a program on this host,
// connected through the launcher's rendezvous.
//
//	ftrun -n 4 [--tag-output] [--kill RANK@DURATION]... [--timeout DURATION] prog [args...]
//
// Run "ftrun --help" for the flags, the environment each rank receives and the
// exit status. All the work is done by package launcher; this is a thin main.
package main
