// Command ftrun starts an ftrma job: N ranks of a program, on this host or
// spread over hosts, connected through the launcher's rendezvous.
//
//	ftrun -n 4 [--oversubscribe] [--tag-output] [--kill RANK@DURATION]... [--timeout DURATION] prog [args...]
//	ftrun -n 8 --hosts local:4,node2:7770:4 prog [args...]
//	ftrun -n 4 --respawn=2 prog [args...]   (2 spare ranks to replace failed ones)
//	ftrun --hostfile H -n 3 --respawn --spare-hosts h4 --transport tcp prog [args...]
//	                                        (a spare starts on its failed rank's host, else on h4)
//	ftrun agent --listen HOST[:PORT] [--once]
//	ftrun --cleanup
//
// "ftrun --cleanup" removes the shared memory of this user's jobs whose ftrun
// or agent was killed by SIGKILL (ftrun also does it quietly when it starts).
// "ftrun agent" is the per-host daemon that starts the ranks of remote hosts;
// ftrun and its agents share a secret in FTRMA_AGENT_SECRET. Run "ftrun
// --help" and "ftrun agent --help" for the flags, the environment each rank
// receives and the exit status. All the work is done by package launcher;
// this is a thin main.
package main
