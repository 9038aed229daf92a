#!/bin/sh
# sj-mpi-entrypoint: the entrypoint of the pods of an MPI gang (see gang/mpi.py).
# Pod 0, the launcher, waits for the workers and execs the command it is given; every other
# pod, a worker, runs sshd for the launcher's ranks and stops once they have.
#
# gang.mpi puts its settings before this script when it builds the pods' command:
#   port mpi_dir ssh_dir run_dir sshd default_wait_seconds launcher_index forward_env
# shellcheck disable=SC2154  # those settings are assigned by the lines put before the script
set -u
newline='
'
hostfile=$mpi_dir/hostfile

log() {
	printf '%s: %s\n' "$0" "$*" >&2
}

# fail MESSAGE [STATUS]: log, leave MESSAGE as the container's termination message, exit.
fail() {
	log "$1"
	if [ -e /dev/termination-log ]; then
		printf '%s\n' "$1" 2>/dev/null >/dev/termination-log || :
	fi
	exit "${2:-1}"
}

uid() {
	id -u 2>/dev/null || echo '?'
}

# ---------------------------------------------------------------------------- launcher

# Sets $listed to the hosts of the mounted hostfile, space-separated ("host slots=N" or "host:N").
read_hostfile() {
	listed=
	[ -r "$hostfile" ] || return 0
	while read -r entry rest || [ -n "$entry" ]; do
		case $entry in '' | '#'*) continue ;; esac
		listed="$listed ${entry%%:*}"
	done <"$hostfile"
	listed=${listed# }
}

# reachable HOST: whether HOST accepts TCP connections on $port.
reachable() {
	if [ "$probe" = bash ]; then
		# shellcheck disable=SC2016  # expanded by that bash, from its own arguments
		if [ "$has_timeout" = 1 ]; then
			timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$port" </dev/null >/dev/null 2>&1
		else
			bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$port" </dev/null >/dev/null 2>&1
		fi
	else
		nc -z -w 5 "$1" "$port" </dev/null >/dev/null 2>&1
	fi
}

launcher() {
	export SJ_MPI_ROLE=launcher
	trap 'exit 143' TERM
	trap 'exit 130' INT
	[ "$#" -gt 0 ] || fail "no command to run on the launcher"
	[ -r "$ssh_dir/ssh-privatekey" ] ||
		fail "cannot read $ssh_dir/ssh-privatekey as uid $(uid): a non-root image needs spec.runAsUser"
	wait_seconds=${SJ_MPI_WAIT_SECONDS:-$default_wait_seconds}
	case $wait_seconds in
	'' | *[!0-9]*) fail "SJ_MPI_WAIT_SECONDS must be a whole number of seconds, not '$wait_seconds'" ;;
	esac
	if command -v bash >/dev/null 2>&1; then
		probe=bash
	elif command -v nc >/dev/null 2>&1; then
		probe=nc
	else
		fail "the image has neither bash nor nc: cannot tell when the workers' sshd is up"
	fi
	has_timeout=0
	if command -v timeout >/dev/null 2>&1; then
		has_timeout=1
	fi
	[ -n "${SJ_HOSTS:-}" ] || fail "SJ_HOSTS is not set"
	# SJ_HOSTS lists every pod of this run, the launcher first.
	workers=
	seen=0
	set -f
	saved_ifs=$IFS
	IFS=,
	for host in $SJ_HOSTS; do
		if [ "$seen" -gt 0 ]; then
			workers="$workers $host"
		fi
		seen=$((seen + 1))
	done
	IFS=$saved_ifs
	workers=${workers# }
	[ -n "$workers" ] || fail "SJ_HOSTS names no worker: '$SJ_HOSTS'"
	deadline=$(($(date +%s) + wait_seconds))
	while :; do
		read_hostfile
		if [ "$listed" = "$workers" ]; then
			pending=
			for host in $workers; do
				reachable "$host" || pending="$pending $host"
			done
			[ -n "$pending" ] || break
			why="not accepting connections on port $port:$pending"
		else
			why="$hostfile lists '$listed' instead of this run's workers '$workers'"
		fi
		[ "$(date +%s)" -lt "$deadline" ] || fail "MPI workers not ready after ${wait_seconds}s: $why"
		sleep 1
	done
	set +f
	log "workers ready: $workers"
	exec "$@"
}

# ---------------------------------------------------------------------------- worker

# Sets $apps to the live processes below this shell other than sshd's own (the MPI daemon and the
# ranks started through ssh, and whatever they started).
scan_apps() {
	table=
	for stat in /proc/[0-9]*/stat; do
		line=
		{ read -r line <"$stat"; } 2>/dev/null || continue
		pid=${line%% *}
		name=${line#*\(}
		name=${name%\)*}
		rest=${line##*\) }
		state=${rest%% *}
		rest=${rest#* }
		ppid=${rest%% *}
		table="$table$pid $ppid $state $name$newline"
	done
	tree=" $$ "
	grown=1
	while [ "$grown" = 1 ]; do
		grown=0
		while read -r pid ppid state name; do
			[ -n "$pid" ] || continue
			case $tree in *" $pid "*) continue ;; esac
			case $tree in *" $ppid "*)
				tree="$tree$pid "
				grown=1
				;;
			esac
		done <<EOF
$table
EOF
	done
	apps=
	while read -r pid ppid state name; do
		[ -n "$pid" ] || continue
		case $tree in *" $pid "*) ;; *) continue ;; esac
		[ "$pid" != "$$" ] && [ "$pid" != "$sshd_pid" ] || continue
		case $state in Z | X | x) continue ;; esac
		case $name in sshd | sshd-* | sshd:*) continue ;; esac
		apps="$apps $pid"
	done <<EOF
$table
EOF
}

drain() {
	trap '' TERM INT
	log "stopping: sshd stays up until the processes started through it have exited"
	while scan_apps && [ -n "$apps" ]; do
		sleep 1
	done
	if [ -n "$sshd_pid" ]; then
		kill -TERM "$sshd_pid" 2>/dev/null || :
		wait "$sshd_pid" 2>/dev/null || :
	fi
	exit 143
}

write_sshd_config() {
	setenv=
	for name in $forward_env; do
		eval "is_set=\${$name+set}"
		[ -n "$is_set" ] || continue
		eval "value=\$$name"
		# shellcheck disable=SC1003  # a backslash between single quotes, as meant
		case $value in
		*'"'* | *'\'* | *"$newline"*)
			log "not passing $name to ssh sessions: its value has a quote, backslash or newline"
			continue
			;;
		esac
		setenv="$setenv \"$name=$value\""
	done
	{
		echo "HostKey $host_key"
		echo "PidFile $run_dir/sshd.pid"
		echo "AuthorizedKeysFile $ssh_dir/authorized_keys"
		echo 'PubkeyAuthentication yes'
		echo 'PasswordAuthentication no'
		echo 'KbdInteractiveAuthentication no'
		echo 'PermitEmptyPasswords no'
		echo 'UsePAM no'
		# Mounted Secrets have owners and modes that sshd's strict checks reject.
		echo 'StrictModes no'
		echo 'PermitUserEnvironment no'
		echo 'X11Forwarding no'
		echo 'AllowAgentForwarding no'
		echo 'AllowTcpForwarding no'
		echo 'PermitTunnel no'
		echo 'PrintMotd no'
		echo 'PrintLastLog no'
		if [ -n "$setenv" ]; then
			echo "SetEnv$setenv"
		fi
	} >"$run_dir/sshd_config"
}

worker() {
	export SJ_MPI_ROLE=worker
	sshd_pid=
	trap drain TERM INT
	[ -x "$sshd" ] || fail "$sshd not found: MPI worker images need the OpenSSH server"
	[ -r "$ssh_dir/authorized_keys" ] ||
		fail "cannot read $ssh_dir/authorized_keys as uid $(uid): a non-root image needs spec.runAsUser"
	umask 077
	mkdir -p "$run_dir" || fail "cannot create $run_dir"
	# The gang's host key, which the launcher's known_hosts pins.
	host_key=$ssh_dir/ssh_host_ed25519_key
	if [ ! -e "$host_key" ]; then
		# A Secret made before host keys were pinned: its client config does not check them either.
		log "$host_key is missing (the ssh Secret predates pinned host keys): using a key made here"
		host_key=$run_dir/ssh_host_ed25519_key
		if [ ! -f "$host_key" ]; then
			ssh-keygen -q -t ed25519 -N '' -C "$0 host key" -f "$host_key" </dev/null >/dev/null ||
				fail "ssh-keygen could not create a host key in $run_dir"
		fi
	fi
	[ -r "$host_key" ] || fail "cannot read $host_key as uid $(uid): a non-root image needs spec.runAsUser"
	if [ "$(uid)" = 0 ]; then
		# sshd started as root wants its privilege separation directory (Debian's path).
		mkdir -m 0755 /run/sshd 2>/dev/null || :
	fi
	write_sshd_config || fail "cannot write $run_dir/sshd_config"
	"$sshd" -D -e -p "$port" -f "$run_dir/sshd_config" &
	sshd_pid=$!
	log "sshd started on port $port"
	wait "$sshd_pid"
	status=$?
	[ "$status" -ne 0 ] || status=1
	fail "sshd exited with status $status" "$status"
}

index=${JOB_COMPLETION_INDEX:-}
case $index in
'' | *[!0-9]*) fail "JOB_COMPLETION_INDEX is '$index': the MPI entrypoint needs an Indexed Job" ;;
"$launcher_index") launcher "$@" ;;
*) worker ;;
esac
