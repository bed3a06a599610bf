#!/usr/bin/env bash
# shellcheck disable=SC2016 # single-quoted scripts are for the inner shell
# cluster.sh - turn this machine into a small cluster of "hosts" for the
# launcher's multi-host tests: each host is a network namespace plus its own
# UTS namespace (own hostname), optionally with a real sshd and a real Slurm
# (slurmctld on its own host "ctl", a slurmd on every host).  Needs root, ip,
# nsenter/unshare/setpriv (util-linux); installs openssh / slurm / munge with
# apt-get when asked for and missing.
#
# Usage (DIR: a work directory for keys, configs, logs and pid records; its
# path may use only [A-Za-z0-9._/+-]):
#   cluster.sh up DIR N [--ssh] [--slurm]
#       Create hosts h1..hN (1 <= N <= 200):
#         - bridge br-ftc in the root namespace with 198.18.60.254/24 (so the
#           root namespace reaches every host);
#         - per host hI a network namespace ftc-hI (eth0 = 198.18.60.(10+I)/24,
#           lo up; the root-side veth is called ftc-hI too, on br-ftc) and a
#           UTS namespace with hostname hI, held by a holder process
#           (`sleep $FTC_LIFETIME`, default 7200 s) whose PID is recorded in
#           DIR/run/hI.holder.rec ("PID STARTTIME").  Everything run "on hI"
#           runs in the holder's net+UTS namespaces and shares the root's
#           mount namespace (same files, same /sys/fs/cgroup).
#         - per host a supervisor (in the root namespaces, detached) that
#           starts the holder and the host's daemons as its children; the
#           daemons get SIGTERM when the supervisor exits (PR_SET_PDEATHSIG),
#           and the supervisor exits when the holder does, so a forgotten
#           cluster's processes end by themselves after FTC_LIFETIME.
#       --ssh: per host an sshd on 198.18.60.(10+I):22 (config
#         DIR/ssh/sshd_config_hI, host key DIR/ssh/hI/, PidFile in DIR/run,
#         log DIR/log/sshd-hI.log), root login by key only, keys in
#         DIR/authorized_keys; a client key DIR/id_ed25519; DIR/ssh_config
#         (Host hI -> its address, User root, BatchMode, StrictHostKeyChecking
#         yes against DIR/known_hosts, which holds every host key), so
#         `ssh -F DIR/ssh_config h2 hostname` prints h2.  Sessions get PATH =
#         the caller's PATH at `up` time (absolute entries) + the standard
#         dirs + Go's bin dirs, and SLURM_CONF with --slurm.
#       --slurm: slurmctld on host "ctl" (namespace ftc-ctl, 198.18.60.1), a
#         slurmd on every hI; config DIR/slurm.conf, state/spool in DIR/slurm,
#         logs in DIR/log; DIR/slurm.env holds the line
#         SLURM_CONF=DIR/slurm.conf.  MUNGE as on a real cluster: the system
#         munged serves the root namespace (started if not running; left
#         running by down), and every host (ctl too) runs its own munged with
#         the same key, because one munged for all hosts would reject a
#         credential decoded on a second host as a replay (ftrun seals one
#         boot line and srun broadcasts it).  For that, with --slurm each host
#         also gets a mount namespace: a slave copy of the root's (same
#         mounts, same files, same /sys/fs/cgroup; later root mounts show up
#         in it) in which only /run/munge differs (bind of
#         /run/ftc-cluster/munge/HOST).  Without --slurm hosts share the
#         root's mount namespace.  Waits (bounded: FTC_WAIT s, default 30)
#         until sinfo shows every node idle; on failure prints the logs.
#       Also writes DIR/hosts (/etc/hosts format; names do not resolve
#       otherwise: ssh uses DIR/ssh_config and Slurm uses NodeAddr).
#       Only one cluster exists at a time (the names are fixed): up refuses
#       while a cluster of another DIR is up (exit 75); leftovers of an
#       earlier DIR whose processes are all gone are removed first.  On
#       failure up prints the logs and takes down what it built (FTC_KEEP=1
#       keeps it for inspection; then `down DIR`).
#   cluster.sh down DIR
#       Stop every daemon/supervisor/holder recorded in DIR (SIGTERM, SIGKILL
#       after a few seconds, waits until they are gone), SIGKILL whatever else
#       still runs in the hosts' UTS namespaces (job steps, ssh sessions,
#       processes started by `on`), delete the veths, namespaces and bridge.
#       Works on a half-built DIR; a no-op on a DIR already down.
#   cluster.sh clean
#       down every DIR recorded in /run/ftc-cluster, then delete any left
#       br-ftc, ftc-* links and ftc-* namespaces.  Kills only recorded PIDs
#       (checked against their recorded start times) and processes in the UTS
#       namespace of a live recorded holder.
#   cluster.sh on DIR HOST CMD [ARG...]
#       Run CMD on HOST (hI or ctl): in its net+UTS (+mount with --slurm)
#       namespaces, as root, with the caller's environment and cwd; exits
#       with CMD's status.  (Entering with a bare `nsenter -t PID -n -u`
#       works too, but then MUNGE clients talk to the root's munged.)
#   cluster.sh pid DIR HOST        print HOST's holder PID (also the first
#       word of DIR/run/HOST.holder.rec)
#   cluster.sh killhost DIR HOST   SIGKILL every process in HOST's UTS
#       namespace except the holder (so the "dead" host's addresses and
#       namespaces remain, `on` still works and `revive` can restart its
#       daemons).  Its processes' sockets close normally (peers may see
#       FIN/RST); for a host that vanishes silently, `cut` it first.
#   cluster.sh revive DIR HOST     restart HOST's daemons after killhost
#   cluster.sh cut DIR HOST        set HOST's root-side veth down (link cut;
#       processes keep running, packets are dropped)
#   cluster.sh heal DIR HOST       set it up again
#   cluster.sh split DIR [--oneway] SIDE_A SIDE_B
#       Partition the cluster without touching any link: SIDE is a
#       comma-separated list of hosts, where "root" names the root namespace
#       (where ftrun runs).  Packets from SIDE_B to SIDE_A are dropped
#       (blackhole routes in SIDE_B's namespaces to SIDE_A's addresses), and,
#       without --oneway, from SIDE_A to SIDE_B too.  Hosts on neither side
#       reach everyone: `split DIR h1 h2` cuts only the h1-h2 path (a partial
#       partition), `split DIR root,h1,h2 h3,h4` splits 3+2 with h3 and h4
#       still reaching each other.  Several splits add up.
#   cluster.sh join DIR            remove every route split added
#   cluster.sh munge               install MUNGE if missing and start the
#       root namespace's munged (left running, as up leaves it): what tests
#       that seal credentials outside a cluster need
#   cluster.sh status DIR          hosts, their recorded processes, sinfo
#   cluster.sh selftest [N]        up a cluster of N (default 3, >= 2) hosts
#       with --ssh --slurm in a temporary DIR, check ssh, on, per-host
#       munge, srun, salloc, tasks per node, cut/heal, killhost/revive and
#       down; prints PASS/FAIL per check (logs on failure); exit 0 only if
#       every check passed.
#
# Exit status: 0 ok, 1 error, 75 busy (another DIR's cluster is up), 77 with
# "NOT RUN: <reason>" when this machine cannot do it (not root, no
# namespaces/veth/bridge, packages missing and not installable).
#
# Slurm settings (see write_slurm below): select/cons_tres + CR_CPU with
# CPUs=$FTC_CPUS (default 8) per node and SlurmdParameters=config_overrides
# (the box has 2 cores; 8 lets `salloc -N N --ntasks-per-node=4` and an
# agent step `srun --overlap` run together), partition OverSubscribe=
# $FTC_OVERSUBSCRIBE (default FORCE:4: concurrent allocations from parallel
# tests share CPUs instead of queueing), TaskPlugin=task/none (no binding to
# CPUs that do not exist), ProctrackType=proctrack/linuxproc, MpiDefault=none,
# ReturnToService=2, JobRequeue=0, SlurmdTimeout=6, MessageTimeout=5,
# KillWait=2.  Measured here (slurm 22.05): a node goes DOWN 11-20 s after
# killhost or cut (each ping of a dead slurmd takes ~6 s of connect retries);
# after revive it is idle again within a second (slurmd registers); after
# heal of a DOWN node, slurmctld polls it back within ~40 s (sooner:
# scontrol update NodeName=hI State=RESUME).
#
# Environment: FTC_LIFETIME (holder lifetime, s), FTC_WAIT (readiness bound,
# s), FTC_CPUS, FTC_OVERSUBSCRIBE, FTC_KEEP.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
NET=198.18.60
BR=br-ftc
PFX=ftc-
REG=/run/ftc-cluster
LIFETIME=${FTC_LIFETIME:-7200}
WAITMAX=${FTC_WAIT:-30}
CPUS=${FTC_CPUS:-8}
OVERSUB=${FTC_OVERSUBSCRIBE:-FORCE:4}
MAXN=200

say() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}
notrun() {
	printf 'NOT RUN: %s\n' "$*"
	exit 77
}
usage() {
	sed -n '3,/^set -euo/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 2
}

# ---------------------------------------------------------------- helpers

need_root() { [ "$(id -u)" = 0 ] || notrun "needs root (uid $(id -u))"; }

# ip_of HOST: the host's address.
ip_of() {
	case $1 in
	ctl) echo "$NET.1" ;;
	h[1-9]*) echo "$NET.$((10 + ${1#h}))" ;;
	*) return 1 ;;
	esac
}

# pstat PID: prints "STATE STARTTIME" of a process (fails if there is none).
pstat() {
	local s f
	{ read -r s <"/proc/$1/stat"; } 2>/dev/null || return 1
	s=${s##*) }
	read -r -a f <<<"$s"
	printf '%s %s\n' "${f[0]}" "${f[19]}"
}

# alive PID START: the process exists, is no zombie and started at START
# (so a reused PID is never taken for ours).
alive() {
	local st
	st=$(pstat "$1") || return 1
	[ "${st%% *}" != Z ] && [ "${st#* }" = "$2" ]
}

# record DIR ROLE PID: remember a process we started (DIR/run/ROLE.rec and
# the machine-wide registry used by clean).
record() {
	local st
	st=$(pstat "$3") || return 1
	printf '%s %s\n' "$3" "${st#* }" >"$1/run/$2.rec"
	printf '%s %s %s %s\n' "$3" "${st#* }" "$2" "$1" >>"$REG/procs"
}

# procs_of DIR: "PID START ROLE" of every process recorded for DIR.
procs_of() {
	local d=$1 f role pid start dd
	{
		if [ -d "$d/run" ]; then
			for f in "$d"/run/*.rec; do
				[ -f "$f" ] || continue
				role=${f##*/}
				role=${role%.rec}
				read -r pid start <"$f" || continue
				echo "$pid $start $role"
			done
		fi
		if [ -f "$REG/procs" ]; then
			while read -r pid start role dd; do
				if [ "$dd" = "$d" ]; then echo "$pid $start $role"; fi
			done <"$REG/procs"
		fi
	} | sort -u
}

# any_alive DIR: some recorded process of DIR still runs.
any_alive() {
	local pid start role
	while read -r pid start role; do
		if alive "$pid" "$start"; then return 0; fi
	done < <(procs_of "$1")
	return 1
}

# wait_gone SECONDS PID:START...: wait until none of them is alive.
wait_gone() {
	local tries=$(($1 * 20)) p left
	shift
	while :; do
		left=0
		for p in "$@"; do
			if alive "${p%%:*}" "${p#*:}"; then left=1; fi
		done
		[ "$left" = 0 ] && return 0
		[ "$tries" -le 0 ] && return 1
		tries=$((tries - 1))
		sleep 0.05
	done
}

# stop_list SECONDS PID:START...: SIGTERM, wait, SIGKILL, wait.
stop_list() {
	local secs=$1 p
	shift
	[ $# -gt 0 ] || return 0
	for p in "$@"; do
		if alive "${p%%:*}" "${p#*:}"; then kill -TERM "${p%%:*}" 2>/dev/null || true; fi
	done
	wait_gone "$secs" "$@" && return 0
	for p in "$@"; do
		if alive "${p%%:*}" "${p#*:}"; then
			say "pid ${p%%:*} did not exit after SIGTERM within ${secs}s: SIGKILL"
			kill -KILL "${p%%:*}" 2>/dev/null || true
		fi
	done
	wait_gone 5 "$@" || say "warning: some processes survived SIGKILL: $*"
}

# holder_rec DIR HOST: "PID START" of the host's holder (fails if none).
holder_rec() {
	local f="$1/run/$2.holder.rec"
	[ -f "$f" ] || return 1
	cat "$f"
}

# holder_of DIR HOST: the PID of HOST's live holder, or die.
holder_of() {
	local pid start
	[ -f "$1/cluster.conf" ] || die "$1 is not a cluster DIR (no $1/cluster.conf)"
	read -r pid start < <(holder_rec "$1" "$2") || die "no host $2 in $1"
	alive "$pid" "$start" || die "host $2 of $1 is gone (its holder $pid has exited; run down)"
	echo "$pid"
}

# sweep_uts HOLDER [KEEP]: SIGKILL every process in HOLDER's UTS namespace
# (except HOLDER itself when KEEP=keep) until there is none; prints the count.
sweep_uts() {
	local h=$1 keep=${2:-} ino round n=0 found line pid
	ino=$(stat -L -c %i "/proc/$h/ns/uts" 2>/dev/null) || {
		echo 0
		return 0
	}
	if [ "$ino" = "$(stat -L -c %i /proc/self/ns/uts)" ]; then
		die "refusing to sweep: holder $h shares the root UTS namespace"
	fi
	# Stop them all first, then kill: a host dies at once, so none of its
	# processes may see another of them die and report it (an agent
	# telling ftrun of its rank's death, and taking a spare, before the
	# agent itself is killed).
	while read -r line; do
		pid=${line#* /proc/}
		pid=${pid%%/*}
		[ "${line%% *}" = "$ino" ] || continue
		[ "$pid" = "$$" ] && continue
		[ "$keep" = keep ] && [ "$pid" = "$h" ] && continue
		kill -STOP "$pid" 2>/dev/null || true
	done < <(stat -L -c '%i %n' /proc/[0-9]*/ns/uts 2>/dev/null || true)
	for ((round = 0; round < 200; round++)); do
		found=0
		while read -r line; do
			pid=${line#* /proc/}
			pid=${pid%%/*}
			[ "${line%% *}" = "$ino" ] || continue
			[ "$pid" = "$$" ] && continue
			[ "$keep" = keep ] && [ "$pid" = "$h" ] && continue
			if kill -KILL "$pid" 2>/dev/null; then
				found=1
				n=$((n + 1))
			fi
		done < <(stat -L -c '%i %n' /proc/[0-9]*/ns/uts 2>/dev/null || true)
		[ "$found" = 0 ] && break
		sleep 0.02
	done
	echo "$n"
}

# conf_get DIR KEY: a value from DIR/cluster.conf.
conf_get() {
	local k v
	[ -f "$1/cluster.conf" ] || return 1
	while IFS='=' read -r k v; do
		if [ "$k" = "$2" ]; then
			echo "$v"
			return 0
		fi
	done <"$1/cluster.conf"
	return 1
}

# hosts_of DIR: the host names of DIR (ctl first when there is one).
hosts_of() {
	local n i
	n=$(conf_get "$1" N) || return 0
	if [ "$(conf_get "$1" SLURM)" = 1 ]; then echo ctl; fi
	for ((i = 1; i <= n; i++)); do echo "h$i"; done
}

check_host() { # DIR HOST
	hosts_of "$1" | grep -x -- "$2" >/dev/null || die "no host '$2' in $1 (hosts: $(hosts_of "$1" | tr '\n' ' '))"
}

absdir() { # DIR (must exist)
	(cd "$1" && pwd -P)
}

lock() {
	mkdir -p "$REG"
	exec 9>"$REG/lock"
	flock -w 300 9 || die "could not lock $REG/lock within 300 s"
}

dump_logs() { # DIR
	local f
	[ -d "$1/log" ] || return 0
	for f in "$1"/log/*; do
		[ -s "$f" ] || continue
		echo "----- $f (last 40 lines)"
		tail -n 40 "$f"
	done
}

# ensure CMD=PACKAGE...: install the packages of missing commands, or NOT RUN.
ensure() {
	local pair missing=() log
	for pair; do
		command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	command -v apt-get >/dev/null 2>&1 || notrun "missing ${missing[*]} and no apt-get"
	log=$(mktemp /tmp/ftc-apt.XXXXXX)
	say "installing ${missing[*]} with apt-get (log $log)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q -o DPkg::Lock::Timeout=300 "${missing[@]}" >"$log" 2>&1; then
		apt-get update -q -o DPkg::Lock::Timeout=300 >>"$log" 2>&1 || true
		apt-get install -y -q -o DPkg::Lock::Timeout=300 "${missing[@]}" >>"$log" 2>&1 ||
			notrun "apt-get install ${missing[*]} failed (see $log)"
	fi
	for pair; do
		command -v "${pair%%=*}" >/dev/null 2>&1 || notrun "${pair%%=*} still missing after installing ${pair#*=}"
	done
	rm -f "$log"
}

base_tools() {
	need_root
	ensure ip=iproute2 nsenter=util-linux unshare=util-linux setpriv=util-linux \
		flock=util-linux timeout=coreutils stat=coreutils hostname=hostname
}

# ---------------------------------------------------------------- supervisor

# daemon_argv DIR HOST NAME: sets ARGV to the daemon's command line.
daemon_argv() {
	case $3 in
	sshd) ARGV=(/usr/sbin/sshd -D -f "$1/ssh/sshd_config_$2" -E "$1/log/sshd-$2.log") ;;
	slurmd) ARGV=(/usr/sbin/slurmd -D -N "$2" -f "$1/slurm.conf") ;;
	slurmctld) ARGV=(/usr/sbin/slurmctld -D -i -f "$1/slurm.conf") ;;
	munged) # in the host's mount namespace /run/munge is $REG/munge/HOST
		ARGV=(setpriv --reuid=munge --regid=munge --clear-groups --pdeathsig TERM --
			/usr/sbin/munged -F --force --socket=/run/munge/munge.socket.2
			--pid-file=/run/munge/munged.pid --seed-file=/run/munge/munged.seed
			--origin="$(ip_of "$2")") ;;
	*) return 1 ;;
	esac
}

# cmd_super DIR HOST (internal): runs detached in the root namespaces; starts
# the holder and the host's daemons (as children, with SIGTERM as their
# parent-death signal), restarts dead daemons on SIGUSR1 (revive), and ends
# them when the holder ends or on SIGTERM.
cmd_super() {
	local d=$1 h=$2 holder hstart i stopping=0 name pid
	local -A dp=()
	record "$d" "$h.super" "$$"
	local -a nsf
	if [ "$(conf_get "$d" SLURM)" = 1 ]; then
		# + a mount namespace, a slave of the root's (same mounts, same
		# files, same /sys/fs/cgroup), where /run/munge is the host's own.
		nsf=(-n -u -m)
		nsenter --net="/run/netns/$PFX$h" unshare -u -m --propagation slave \
			sh -c 'mount --bind "$3" /run/munge && hostname "$1" && exec sleep "$2"' \
			sh "$h" "$LIFETIME" "$REG/munge/$h" </dev/null &
	else
		nsf=(-n -u)
		nsenter --net="/run/netns/$PFX$h" unshare -u \
			sh -c 'hostname "$1" && exec sleep "$2"' sh "$h" "$LIFETIME" </dev/null &
	fi
	holder=$!
	record "$d" "$h.holder" "$holder" || die "$h: holder exited at once"
	read -r _ hstart < <(holder_rec "$d" "$h")
	for ((i = 0; i < 250; i++)); do
		[ "$(cat "/proc/$holder/comm" 2>/dev/null)" = sleep ] && break
		alive "$holder" "$hstart" || die "$h: holder exited"
		sleep 0.02
	done
	[ "$(cat "/proc/$holder/comm" 2>/dev/null)" = sleep ] || die "$h: holder did not start"
	[ "$(stat -L -c %i "/proc/$holder/ns/uts")" != "$(stat -L -c %i /proc/self/ns/uts)" ] || die "$h: holder has no UTS namespace of its own"
	stat -L -c %i "/proc/$holder/ns/uts" >"$d/run/$h.uts"

	start_daemons() {
		local st
		[ -f "$d/run/$h.daemons" ] || return 0
		while read -r name; do
			[ -n "$name" ] || continue
			if [ -n "${dp[$name]:-}" ] && alive "${dp[$name]%%:*}" "${dp[$name]#*:}"; then continue; fi
			daemon_argv "$d" "$h" "$name" || continue
			setpriv --pdeathsig TERM -- nsenter -t "$holder" "${nsf[@]}" -- "${ARGV[@]}" </dev/null >>"$d/log/$h.$name.out" 2>&1 &
			pid=$!
			if record "$d" "$h.$name" "$pid"; then
				read -r _ st <"$d/run/$h.$name.rec"
				dp[$name]="$pid:$st"
				echo "$(date +%T) started $name: pid $pid"
			else
				echo "$(date +%T) $name exited at once"
			fi
			if [ "$name" = munged ]; then # the other daemons need it
				for ((i = 0; i < 200; i++)); do
					[ -S "$REG/munge/$h/munge.socket.2" ] && break
					sleep 0.025
				done
			fi
		done <"$d/run/$h.daemons"
	}
	trap 'start_daemons' USR1
	trap 'stopping=1' TERM INT HUP
	start_daemons
	: >"$d/run/$h.ready"
	while [ "$stopping" = 0 ] && alive "$holder" "$hstart"; do
		wait "$holder" 2>/dev/null || true
	done
	trap - USR1
	echo "$(date +%T) stopping (holder alive: $(alive "$holder" "$hstart" && echo yes || echo no))"
	local all=()
	for name in "${!dp[@]}"; do all+=("${dp[$name]}"); done
	stop_list 5 "${all[@]}"
	stop_list 1 "$holder:$hstart"
}

# ---------------------------------------------------------------- configs

write_ssh() { # DIR N SLURM
	local d=$1 n=$2 slurm=$3 i h ip p path="" envs
	local std=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	# PATH for sessions: the caller's absolute entries, the standard dirs,
	# then Go's bin dirs (go itself and GOPATH/bin).
	local -a cand=()
	IFS=: read -r -a cand <<<"${PATH:-}:$std"
	p=$(command -v go 2>/dev/null || true)
	[ -n "$p" ] && cand+=("$(dirname "$(readlink -f "$p")")" "$(dirname "$p")")
	[ -d /usr/local/go/bin ] && cand+=(/usr/local/go/bin)
	cand+=("${GOPATH:-${HOME:-/root}/go}/bin")
	for p in "${cand[@]}"; do
		[[ $p == /* && $p =~ ^[A-Za-z0-9._/+-]+$ ]] || continue
		case ":$path:" in *":$p:"*) continue ;; esac
		path=${path:+$path:}$p
	done
	envs="PATH=$path"
	[ "$slurm" = 1 ] && envs="$envs SLURM_CONF=$d/slurm.conf"

	[ -d /run/sshd ] || install -d -m 755 /run/sshd
	mkdir -p "$d/ssh"
	ssh-keygen -q -t ed25519 -N '' -C ftc-client -f "$d/id_ed25519"
	cp "$d/id_ed25519.pub" "$d/authorized_keys"
	: >"$d/known_hosts"
	{
		echo "# generated by scripts/cluster.sh; use: ssh -F $d/ssh_config hI CMD"
		for ((i = 1; i <= n; i++)); do
			printf 'Host h%s\n  HostName %s\n' "$i" "$(ip_of "h$i")"
		done
		cat <<EOF
Host *
  User root
  IdentityFile $d/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $d/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
  ControlMaster no
  ControlPath none
  ForwardAgent no
  ForwardX11 no
EOF
	} >"$d/ssh_config"
	for ((i = 1; i <= n; i++)); do
		h=h$i
		ip=$(ip_of "$h")
		mkdir -p "$d/ssh/$h"
		ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$d/ssh/$h/ssh_host_ed25519_key"
		echo "$h,$ip $(cut -d' ' -f1,2 "$d/ssh/$h/ssh_host_ed25519_key.pub")" >>"$d/known_hosts"
		cat >"$d/ssh/sshd_config_$h" <<EOF
# generated by scripts/cluster.sh for host $h
ListenAddress $ip:22
HostKey $d/ssh/$h/ssh_host_ed25519_key
PidFile $d/run/sshd-$h.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile $d/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
StrictModes no
UsePAM no
UseDNS no
PermitUserEnvironment no
SetEnv $envs
X11Forwarding no
PrintMotd no
PrintLastLog no
MaxStartups 200
MaxSessions 100
LoginGraceTime 30
Subsystem sftp internal-sftp
LogLevel INFO
EOF
	done
}

# closefds closes every file descriptor above 2 of the current (sub)shell.
closefds() {
	local f n
	for f in /proc/$BASHPID/fd/*; do
		n=${f##*/}
		if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-"; fi
	done
}

start_munge() {
	local i
	if [ ! -s /etc/munge/munge.key ]; then
		mungekey -c -f
		chown munge:munge /etc/munge/munge.key
	fi
	if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
	install -d -o munge -g munge -m 755 /run/munge
	# The root's munged outlives the cluster: it must not hold any file
	# the caller had open (a lock such as flock's would stay taken).
	(
		closefds
		runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 ||
			runuser -u munge -- /usr/sbin/munged --force </dev/null >/dev/null 2>&1 || true
	)
	for ((i = 0; i < 100; i++)); do
		if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
		sleep 0.05
	done
	die "munged does not work (munge -n | unmunge fails)"
}

cmd_munge() {
	[ $# -eq 0 ] || usage
	need_root
	ensure /usr/sbin/munged=munge munge=munge unmunge=munge
	start_munge
}

write_slurm() { # DIR N
	local d=$1 n=$2 i
	mkdir -p "$d/slurm/state" "$d/slurm/spool"
	for ((i = 1; i <= n; i++)); do mkdir -p "$d/slurm/spool/h$i"; done
	{
		cat <<EOF
# generated by scripts/cluster.sh
ClusterName=ftc
SlurmctldHost=ctl($(ip_of ctl))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$d/slurm/state
SlurmdSpoolDir=$d/slurm/spool/%n
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SlurmdTimeout=6
MessageTimeout=5
TCPTimeout=2
KillWait=2
InactiveLimit=0
EOF
		for ((i = 1; i <= n; i++)); do
			echo "NodeName=h$i NodeAddr=$(ip_of "h$i") CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 State=UNKNOWN"
		done
		echo "PartitionName=ftc Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=$OVERSUB"
	} >"$d/slurm.conf"
	echo "SLURM_CONF=$d/slurm.conf" >"$d/slurm.env"
}

# ---------------------------------------------------------------- network

# ftc_links / ftc_netns: what exists on the machine under our names.
ftc_links() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^($PFX.*|$BR)\$" || true; }
ftc_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PFX" || true; }

net_remove_all() {
	local l
	# split's routes in the root namespace (those in the hosts' namespaces
	# go with the namespaces)
	for l in $(ip route show type blackhole 2>/dev/null | awk '{print $2}' | grep -F "$NET." || true); do
		ip route del blackhole "$l" 2>/dev/null || true
	done
	for l in $(ftc_links); do
		[ "$l" = "$BR" ] && continue
		ip link del "$l" 2>/dev/null || true
	done
	for l in $(ftc_netns); do ip netns del "$l" 2>/dev/null || true; done
	ip link del "$BR" 2>/dev/null || true
}

net_add_host() { # HOST
	local h=$1 ns=$PFX$1
	ip netns add "$ns"
	ip link add "$ns" type veth peer name eth0 netns "$ns"
	ip link set "$ns" master "$BR" up
	ip -n "$ns" addr add "$(ip_of "$h")/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
}

# ---------------------------------------------------------------- down

# do_down DIR: stop DIR's processes; remove the network if DIR owns it.
do_down() {
	local d=$1 pid start role p owner=""
	local -a daemons=() holders=()
	while read -r pid start role; do
		[ -n "$pid" ] || continue
		case $role in
		*.holder) holders+=("$pid:$start") ;;
		*.super) ;;
		*) daemons+=("$pid:$start") ;;
		esac
	done < <(procs_of "$d")
	# daemons first (gracefully), then whatever else runs on the hosts, then
	# the supervisors and holders.
	stop_list 4 "${daemons[@]}"
	for p in "${holders[@]}"; do
		if alive "${p%%:*}" "${p#*:}"; then sweep_uts "${p%%:*}" keep >/dev/null; fi
	done
	local -a rest=()
	while read -r pid start role; do
		[ -n "$pid" ] && rest+=("$pid:$start")
	done < <(procs_of "$d")
	for p in "${rest[@]}"; do
		if alive "${p%%:*}" "${p#*:}"; then kill -KILL "${p%%:*}" 2>/dev/null || true; fi
	done
	wait_gone 5 "${rest[@]}" || say "warning: recorded processes of $d survived SIGKILL"
	[ -f "$REG/owner" ] && owner=$(cat "$REG/owner")
	if [ "$owner" = "$d" ]; then
		net_remove_all
		rm -rf "$REG/munge"
		rm -f "$REG/owner"
	fi
	rm -f "$d/run/split.routes"
	if [ -f "$REG/procs" ]; then
		awk -v d="$d" '$4 != d' "$REG/procs" >"$REG/procs.new" || true
		mv -f "$REG/procs.new" "$REG/procs"
	fi
	if [ -d "$d/run" ]; then
		rm -f "$d"/run/*.rec "$d"/run/*.ready "$d/run/up"
		: >"$d/run/down"
	fi
}

cmd_down() {
	[ $# -eq 1 ] || usage
	base_tools
	local d
	[ -d "$1" ] || die "no such DIR: $1"
	d=$(absdir "$1")
	lock
	local t0=$EPOCHREALTIME
	do_down "$d"
	say "down $d in $(elapsed "$t0") s"
}

cmd_clean() {
	[ $# -eq 0 ] || usage
	base_tools
	lock
	local d
	local -a dirs=()
	[ -f "$REG/owner" ] && dirs+=("$(cat "$REG/owner")")
	[ -f "$REG/procs" ] && mapfile -t -O "${#dirs[@]}" dirs < <(awk '{print $4}' "$REG/procs")
	for d in $(printf '%s\n' "${dirs[@]}" | sort -u); do
		[ -n "$d" ] || continue
		say "clean: down $d"
		[ -f "$REG/owner" ] || echo "$d" >"$REG/owner" # let do_down remove the network
		do_down "$d"
	done
	net_remove_all
	rm -rf "$REG/munge"
	rm -f "$REG/owner" "$REG/procs"
	if [ -n "$(ftc_links)$(ftc_netns)" ]; then
		die "still present after clean: $(ftc_links | tr '\n' ' ') $(ftc_netns | tr '\n' ' ')"
	fi
	say "clean: no $BR, no $PFX* links or namespaces left"
}

elapsed() { # START (an $EPOCHREALTIME)
	local now=$EPOCHREALTIME
	awk -v a="$1" -v b="$now" 'BEGIN{printf "%.2f", b - a}'
}

# ---------------------------------------------------------------- up

UP_DIR=""
UP_OK=0
up_exit() {
	local rc=$?
	[ -n "$UP_DIR" ] && [ "$UP_OK" = 0 ] || return 0
	if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$rc" != 75 ]; then
		echo "===== up failed; logs of $UP_DIR:" >&2
		dump_logs "$UP_DIR" >&2
	fi
	if [ "${FTC_KEEP:-0}" = 1 ]; then
		say "FTC_KEEP=1: leaving the half-built cluster; run: $SELF down $UP_DIR"
	else
		do_down "$UP_DIR" || true
	fi
}

cmd_up() {
	[ $# -ge 2 ] || usage
	local d=$1 n=$2 ssh=0 slurm=0 a i h owner t0=$EPOCHREALTIME
	shift 2
	for a; do
		case $a in
		--ssh) ssh=1 ;;
		--slurm) slurm=1 ;;
		*) die "up: unknown option '$a'" ;;
		esac
	done
	if ! [[ $n =~ ^[1-9][0-9]*$ ]] || [ "$n" -gt "$MAXN" ]; then die "up: N must be 1..$MAXN, not '$n'"; fi
	base_tools
	[ "$ssh" = 1 ] && ensure /usr/sbin/sshd=openssh-server ssh=openssh-client ssh-keygen=openssh-client
	[ "$slurm" = 1 ] && ensure /usr/sbin/slurmd=slurmd /usr/sbin/slurmctld=slurmctld srun=slurm-client \
		sinfo=slurm-client salloc=slurm-client /usr/sbin/munged=munge munge=munge unmunge=munge
	unshare -n -u true 2>/dev/null || notrun "cannot create network/UTS namespaces (unshare -n -u failed)"
	mkdir -p "$d"
	d=$(absdir "$d")
	[[ $d =~ ^[A-Za-z0-9._/+-]+$ ]] || die "DIR path may use only [A-Za-z0-9._/+-]: $d"

	lock
	# One cluster at a time: the names are fixed.
	if [ -n "$(ftc_links)$(ftc_netns)" ]; then
		owner=""
		[ -f "$REG/owner" ] && owner=$(cat "$REG/owner")
		if [ -z "$owner" ]; then
			die "$BR / $PFX* exist but no cluster recorded as their owner: run $SELF clean"
		elif any_alive "$owner"; then
			say "error: a cluster is up (DIR $owner): run $SELF down $owner (or $SELF clean)"
			exit 75
		fi
		say "removing stale leftovers of the cluster of $owner (its processes are gone)"
		do_down "$owner"
		[ -z "$(ftc_links)$(ftc_netns)" ] || die "could not remove the leftovers of $owner; run $SELF clean"
	fi
	if any_alive "$d"; then
		say "error: $d still has running processes recorded: run $SELF down $d"
		exit 75
	fi
	UP_DIR=$d
	trap up_exit EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
	echo "$d" >"$REG/owner"
	rm -rf "$d/run" "$d/log" "$d/ssh" "$d/slurm"
	rm -f "$d/ssh_config" "$d/known_hosts" "$d/authorized_keys" "$d/id_ed25519" "$d/id_ed25519.pub" \
		"$d/slurm.conf" "$d/slurm.env" "$d/hosts"
	mkdir -p "$d/run" "$d/log"
	printf 'N=%s\nSSH=%s\nSLURM=%s\n' "$n" "$ssh" "$slurm" >"$d/cluster.conf"
	mapfile -t hosts < <(hosts_of "$d")

	# network
	ip link add "$BR" type bridge 2>"$d/log/net.err" || notrun "cannot create a bridge: $(cat "$d/log/net.err")"
	ip addr add "$NET.254/24" dev "$BR"
	ip link set "$BR" up
	for h in "${hosts[@]}"; do net_add_host "$h"; done
	for h in "${hosts[@]}"; do echo "$(ip_of "$h") $h"; done >"$d/hosts"

	# configs and the daemons of each host
	[ "$ssh" = 1 ] && write_ssh "$d" "$n" "$slurm"
	if [ "$slurm" = 1 ]; then
		start_munge
		write_slurm "$d" "$n"
		printf '%s\n' munged slurmctld >"$d/run/ctl.daemons"
		rm -rf "$REG/munge"
		for h in "${hosts[@]}"; do install -d -o munge -g munge -m 755 "$REG/munge/$h"; done
	fi
	for ((i = 1; i <= n; i++)); do
		{
			[ "$slurm" = 1 ] && echo munged
			[ "$ssh" = 1 ] && echo sshd
			[ "$slurm" = 1 ] && echo slurmd
			true
		} >"$d/run/h$i.daemons"
	done

	# supervisors (detached; never holding our lock or our stdout)
	for h in "${hosts[@]}"; do
		setsid "$SELF" _super "$d" "$h" </dev/null >>"$d/log/$h.super.log" 2>&1 9>&- &
		record "$d" "$h.super" "$!" || true # (setsid execs: $! is the supervisor)
	done

	# readiness
	local tries=$((WAITMAX * 20))
	for h in "${hosts[@]}"; do
		while [ ! -e "$d/run/$h.ready" ]; do
			[ "$tries" -gt 0 ] || die "host $h did not come up within ${WAITMAX}s"
			tries=$((tries - 1))
			sleep 0.05
		done
	done
	if [ "$ssh" = 1 ]; then
		for ((i = 1; i <= n; i++)); do
			until timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/22"' _ "$(ip_of "h$i")" 2>/dev/null; do
				[ "$tries" -gt 0 ] || die "sshd of h$i does not accept connections within ${WAITMAX}s"
				tries=$((tries - 1))
				sleep 0.05
			done
		done
	fi
	if [ "$slurm" = 1 ]; then
		local idle out=""
		while :; do
			out=$(SLURM_CONF="$d/slurm.conf" timeout 5 sinfo -h -N -o '%N %T' 2>&1 || true)
			idle=$(grep -c ' idle$' <<<"$out" || true)
			[ "$idle" = "$n" ] && break
			[ "$tries" -gt 0 ] || die "Slurm nodes not all idle within ${WAITMAX}s; sinfo says: $out"
			tries=$((tries - 1))
			sleep 0.1
		done
	fi
	: >"$d/run/up"
	UP_OK=1
	echo "cluster up in $(elapsed "$t0") s: DIR=$d, hosts h1..h$n ($(ip_of h1)..$(ip_of "h$n"))"
	[ "$ssh" = 1 ] && echo "  ssh -F $d/ssh_config h1 hostname"
	[ "$slurm" = 1 ] && echo "  export SLURM_CONF=$d/slurm.conf   # also in $d/slurm.env; slurmctld on ctl ($(ip_of ctl))"
	echo "  $SELF on $d h1 CMD...   |   $SELF down $d"
}

# ---------------------------------------------------------------- per-host commands

cmd_on() {
	[ $# -ge 3 ] || usage
	need_root
	local d h pid
	d=$(absdir "$1") || die "no such DIR: $1"
	h=$2
	shift 2
	check_host "$d" "$h"
	pid=$(holder_of "$d" "$h")
	if [ "$(conf_get "$d" SLURM)" = 1 ]; then
		exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@"
	fi
	exec nsenter -t "$pid" -n -u -- "$@"
}

cmd_pid() {
	[ $# -eq 2 ] || usage
	local d
	d=$(absdir "$1") || die "no such DIR: $1"
	check_host "$d" "$2"
	holder_of "$d" "$2"
}

cmd_killhost() {
	[ $# -eq 2 ] || usage
	need_root
	local d pid n
	d=$(absdir "$1") || die "no such DIR: $1"
	check_host "$d" "$2"
	pid=$(holder_of "$d" "$2")
	n=$(sweep_uts "$pid" keep)
	say "killhost $2: killed $n processes (holder $pid kept)"
}

cmd_revive() {
	[ $# -eq 2 ] || usage
	need_root
	local d h pid start name i
	d=$(absdir "$1") || die "no such DIR: $1"
	h=$2
	check_host "$d" "$h"
	holder_of "$d" "$h" >/dev/null
	read -r pid start <"$d/run/$h.super.rec" || die "no supervisor recorded for $h"
	alive "$pid" "$start" || die "the supervisor of $h is gone"
	kill -USR1 "$pid"
	[ -f "$d/run/$h.daemons" ] || return 0
	while read -r name; do
		[ -n "$name" ] || continue
		for ((i = 0; i < 200; i++)); do
			if read -r pid start 2>/dev/null <"$d/run/$h.$name.rec" && alive "$pid" "$start"; then break; fi
			sleep 0.05
		done
		alive "$pid" "$start" || die "$name of $h did not restart"
		if [ "$name" = sshd ]; then
			for ((i = 0; i < 200; i++)); do
				timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/22"' _ "$(ip_of "$h")" 2>/dev/null && break
				sleep 0.05
			done
		fi
	done <"$d/run/$h.daemons"
	say "revive $h: daemons running"
}

cmd_link() { # up|down DIR HOST
	[ $# -eq 3 ] || usage
	need_root
	local d
	d=$(absdir "$2") || die "no such DIR: $2"
	check_host "$d" "$3"
	ip link set "$PFX$3" "$1"
}

# split_side DIR SIDE: the side's namespaces and addresses, "NS IP" per
# line (NS "-" for the root namespace).
split_side() {
	local h
	for h in ${2//,/ }; do
		if [ "$h" = root ]; then
			echo "- $NET.254"
		else
			check_host "$1" "$h"
			echo "$PFX$h $(ip_of "$h")"
		fi
	done
}

# split_drop DIR FROM TO: blackhole routes in FROM's namespaces to TO's
# addresses, recorded in DIR/run/split.routes for join.
split_drop() {
	local d=$1 fns fip tns tip
	while read -r fns fip; do
		while read -r tns tip; do
			[ "$fip" = "$tip" ] && die "split: $fip is on both sides"
			if [ "$fns" = - ]; then
				ip route replace blackhole "$tip/32"
			else
				ip -n "$fns" route replace blackhole "$tip/32"
			fi
			echo "$fns $tip" >>"$d/run/split.routes"
		done < <(split_side "$d" "$3")
	done < <(split_side "$d" "$2")
}

cmd_split() { # DIR [--oneway] SIDE_A SIDE_B
	need_root
	[ $# -ge 3 ] || usage
	local d oneway=0
	d=$(absdir "$1") || die "no such DIR: $1"
	shift
	if [ "$1" = --oneway ]; then
		oneway=1
		shift
	fi
	[ $# -eq 2 ] || usage
	split_side "$d" "$1" >/dev/null
	split_side "$d" "$2" >/dev/null
	split_drop "$d" "$2" "$1"
	if [ $oneway = 0 ]; then split_drop "$d" "$1" "$2"; fi
}

cmd_join() { # DIR
	need_root
	[ $# -eq 1 ] || usage
	local d ns ip
	d=$(absdir "$1") || die "no such DIR: $1"
	[ -f "$d/run/split.routes" ] || return 0
	while read -r ns ip; do
		if [ "$ns" = - ]; then
			ip route del blackhole "$ip/32" 2>/dev/null || true
		else
			ip -n "$ns" route del blackhole "$ip/32" 2>/dev/null || true
		fi
	done <"$d/run/split.routes"
	rm -f "$d/run/split.routes"
}

cmd_status() {
	[ $# -eq 1 ] || usage
	local d pid start role st
	d=$(absdir "$1") || die "no such DIR: $1"
	echo "DIR $d: $(tr '\n' ' ' <"$d/cluster.conf" 2>/dev/null)owner=$(cat "$REG/owner" 2>/dev/null || echo none)"
	while read -r pid start role; do
		[ -n "$pid" ] || continue
		if alive "$pid" "$start"; then st=running; else st=gone; fi
		printf '  %-16s %7s %s\n' "$role" "$pid" "$st"
	done < <(procs_of "$d")
	if [ "$(conf_get "$d" SLURM || true)" = 1 ] && [ -f "$d/run/up" ]; then
		SLURM_CONF="$d/slurm.conf" timeout 5 sinfo -N || true
	fi
}

# ---------------------------------------------------------------- selftest

cmd_selftest() {
	local n=${1:-3}
	if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ] || [ "$n" -gt "$MAXN" ]; then die "selftest: N must be 2..$MAXN"; fi
	need_root
	local d rc=0 fails=0 out want t0 i hn="h$n" ipn
	ipn=$(ip_of "$hn")
	d=$(mktemp -d /tmp/ftc-selftest.XXXXXX)
	echo "== selftest: $n hosts in $d"
	t0=$EPOCHREALTIME
	"$SELF" up "$d" "$n" --ssh --slurm || rc=$?
	case $rc in
	0) echo "PASS up ($(elapsed "$t0") s)" ;;
	77) exit 77 ;;
	75) notrun "another cluster is up on this machine (see above)" ;;
	*)
		echo "FAIL up (exit $rc)"
		exit 1
		;;
	esac
	# An interrupted selftest takes its cluster down too (a no-op after down).
	# shellcheck disable=SC2064 # expand now: d is local
	trap "$(printf '%q down %q >/dev/null 2>&1 || true' "$SELF" "$d")" EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
	export SLURM_CONF="$d/slurm.conf"
	local S=(ssh -F "$d/ssh_config")

	# check NAME WANT CMD...: CMD's stdout must equal WANT.
	check() {
		local name=$1 want=$2 got r=0
		shift 2
		got=$(timeout 60 "$@" 2>"$d/log/check.err") || r=$?
		if [ "$r" = 0 ] && [ "$got" = "$want" ]; then
			echo "PASS $name"
		else
			echo "FAIL $name (exit $r)"
			echo "  want: $(printf '%q' "$want")"
			echo "  got:  $(printf '%q' "$got")"
			sed 's/^/  stderr: /' "$d/log/check.err"
			fails=$((fails + 1))
		fi
	}
	# uts_count HOST: processes in the host's UTS namespace.
	uts_count() {
		local ino
		ino=$(stat -L -c %i "/proc/$("$SELF" pid "$d" "$1")/ns/uts")
		stat -L -c %i /proc/[0-9]*/ns/uts 2>/dev/null | grep -cx "$ino" || true
	}
	# node_state HOST: its sinfo state.
	node_state() { timeout 10 sinfo -h -n "$1" -N -o '%T' 2>/dev/null || true; }
	wait_state() { # HOST PATTERN SECONDS
		local k st
		for ((k = 0; k < $3 * 5; k++)); do
			st=$(node_state "$1")
			[[ $st =~ $2 ]] && return 0
			sleep 0.2
		done
		echo "  $1 state is '$st', not /$2/ after $3 s" >&2
		return 1
	}
	want=$(for ((i = 1; i <= n; i++)); do echo "h$i"; done)

	check "ssh h2 hostname" h2 "${S[@]}" h2 hostname
	check "ssh session PATH finds go and srun" "$(command -v go || echo none) /usr/bin/srun" \
		"${S[@]}" h2 'echo "$(command -v go || echo none) $(command -v srun)"'
	check "ssh absolute path + SLURM_CONF in session" "ok $d/slurm.conf" "${S[@]}" h1 "/bin/echo ok \$SLURM_CONF"
	check "ssh from h1 to $hn" "$hn" "$SELF" on "$d" h1 "${S[@]}" "$hn" hostname
	check "on $hn: hostname, address, env and cwd" "$hn $ipn 42 $PWD" \
		env FTC_X=42 "$SELF" on "$d" "$hn" sh -c 'echo "$(hostname) $(ip -4 -o addr show eth0 | awk "{print \$4}" | cut -d/ -f1) $FTC_X $(pwd)"'
	check "root namespace reaches every host" "$want" \
		bash -c 'for ((i=1;i<=$1;i++)); do exec 3<>"/dev/tcp/198.18.60.$((10+i))/22" && echo "h$i"; exec 3>&-; done' _ "$n"
	check "srun -N$n hostname" "$want" sh -c "srun -N$n hostname | sort"
	check "per-host munged: a credential from h1 decodes on h2 and $hn" "h2 ok
$hn ok" \
		sh -c 'c=$("$1" on "$2" h1 munge -n) && for h in h2 "$3"; do echo "$c" | "$1" on "$2" "$h" unmunge >/dev/null && echo "$h ok"; done' _ "$SELF" "$d" "$hn"
	check "one credential broadcast by srun --input all decodes on every node" "$want" \
		sh -c "munge -n | srun -N$n --input all sh -c 'unmunge >/dev/null && hostname' | sort"
	check "salloc -N $n nodelist" "h[1-$n]" salloc -Q -N "$n" sh -c 'echo $SLURM_JOB_NODELIST'
	check "salloc --ntasks-per-node=4 + srun --overlap (from h1)" \
		"$(for ((i = 1; i <= n; i++)); do echo "4 h$i"; done)" \
		"$SELF" on "$d" h1 salloc -Q -N "$n" --ntasks-per-node=4 sh -c 'srun --overlap hostname | sort | uniq -c | awk "{print \$1, \$2}"'
	check "agent-style step (1 task per node, --overlap) inside a 4-per-node allocation" \
		"4(x$n) ${want//$'\n'/ }" \
		salloc -Q -N "$n" --ntasks-per-node=4 sh -c 'echo "$SLURM_TASKS_PER_NODE" $(srun --overlap -N "$SLURM_NNODES" -n "$SLURM_NNODES" --ntasks-per-node=1 hostname | sort)'
	check "two concurrent 8-tasks-per-node allocations both start" "ok
ok" sh -c 'for k in 1 2; do salloc -Q --immediate=20 -N '"$n"' --ntasks-per-node=8 sh -c "sleep 2; echo ok" & done; wait'

	# cut / heal
	"$SELF" cut "$d" "$hn"
	check "cut $hn: root cannot connect" "cut" sh -c "if timeout 2 bash -c 'exec 3<>/dev/tcp/$ipn/22' 2>/dev/null; then echo reached; else echo cut; fi"
	check "cut $hn: h1 cannot connect, $hn's sshd still runs" "cut running" \
		"$SELF" on "$d" h1 sh -c "if timeout 2 bash -c 'exec 3<>/dev/tcp/$ipn/22' 2>/dev/null; then r=reached; else r=cut; fi; read -r p s <'$d/run/$hn.sshd.rec'; kill -0 \$p && echo \$r running"
	"$SELF" heal "$d" "$hn"
	check "heal $hn: ssh works again" "$hn" "${S[@]}" "$hn" hostname

	# split / join: a partial partition (h1-hN only), then a one-way one
	"$SELF" split "$d" h1 "$hn"
	check "split h1 $hn: h1 cannot connect, root can" "cut reached" sh -c \
		"a=\$('$SELF' on '$d' h1 sh -c \"if timeout 2 bash -c 'exec 3<>/dev/tcp/$ipn/22' 2>/dev/null; then echo reached; else echo cut; fi\"); if timeout 2 bash -c 'exec 3<>/dev/tcp/$ipn/22' 2>/dev/null; then echo \$a reached; else echo \$a cut; fi"
	"$SELF" join "$d"
	check "join: h1 connects again" "reached" "$SELF" on "$d" h1 sh -c "if timeout 2 bash -c 'exec 3<>/dev/tcp/$ipn/22' 2>/dev/null; then echo reached; else echo cut; fi"
	"$SELF" split "$d" --oneway h1 "$hn"
	check "split --oneway h1 $hn: only $hn drops toward h1" "0 1" sh -c \
		"echo \$(ip -n ${PFX}h1 route show type blackhole | wc -l) \$(ip -n $PFX$hn route show type blackhole | grep -c '$NET.11')"
	"$SELF" join "$d"

	# killhost / revive
	local before after t1
	before=$(uts_count "$hn")
	t1=$EPOCHREALTIME
	"$SELF" killhost "$d" "$hn"
	after=$(uts_count "$hn")
	check "killhost $hn: only its holder is left (had $before processes)" "1" echo "$after"
	check "killhost $hn: ssh to it fails, h1 unaffected" "fail h1" \
		sh -c "if ${S[*]} -o ConnectTimeout=2 $hn true 2>/dev/null; then r=ok; else r=fail; fi; echo \$r \$(${S[*]} h1 hostname)"
	if wait_state "$hn" '^down' 30; then
		echo "PASS slurm marks $hn down ($(elapsed "$t1") s after killhost)"
	else
		echo "FAIL slurm marks $hn down"
		fails=$((fails + 1))
	fi
	t1=$EPOCHREALTIME
	"$SELF" revive "$d" "$hn"
	if wait_state "$hn" '^idle$' 30; then
		echo "PASS revive $hn: node idle again ($(elapsed "$t1") s)"
	else
		echo "FAIL revive $hn: node idle again"
		fails=$((fails + 1))
	fi
	check "revive $hn: srun -N$n hostname" "$want" sh -c "srun -N$n hostname | sort"
	check "revive $hn: ssh" "$hn" "${S[@]}" "$hn" hostname

	check "a second up is refused while the cluster runs" "75" \
		sh -c "'$SELF' up '$d.2' 1 >/dev/null 2>&1; echo \$?; rm -rf '$d.2'"

	if [ "$fails" -gt 0 ]; then
		echo "===== logs of $d"
		dump_logs "$d"
	fi
	local recs
	recs=$(procs_of "$d" | awk '{print $1 ":" $2}')
	t0=$EPOCHREALTIME
	if "$SELF" down "$d"; then
		trap - EXIT
		echo "PASS down ($(elapsed "$t0") s)"
	else
		echo "FAIL down"
		fails=$((fails + 1))
	fi
	local left="" p
	for p in $recs; do alive "${p%%:*}" "${p#*:}" && left="$left ${p%%:*}"; done
	check "down left nothing: no $BR, $PFX* links/netns or recorded processes" "" \
		echo "$(ftc_links | tr '\n' ' ')$(ftc_netns | tr '\n' ' ')$left"
	if [ "$fails" = 0 ]; then
		echo "== selftest PASS"
		rm -rf "$d"
	else
		echo "== selftest FAIL: $fails check(s) failed (logs in $d)"
		return 1
	fi
}

# ---------------------------------------------------------------- main

main() {
	[ $# -ge 1 ] || usage
	local c=$1
	shift
	case $c in
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	clean) cmd_clean "$@" ;;
	on) cmd_on "$@" ;;
	pid) cmd_pid "$@" ;;
	killhost) cmd_killhost "$@" ;;
	revive) cmd_revive "$@" ;;
	cut) cmd_link down "$@" ;;
	heal) cmd_link up "$@" ;;
	split) cmd_split "$@" ;;
	join) cmd_join "$@" ;;
	status) cmd_status "$@" ;;
	munge) cmd_munge "$@" ;;
	selftest) cmd_selftest "$@" ;;
	_super) cmd_super "$@" ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
