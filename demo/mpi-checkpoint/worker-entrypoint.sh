#!/usr/bin/env bash
# Entrypoint of the MPI workers (gang members other than the launcher, pod 0): an sshd through which
# the launcher's mpirun starts the ranks on this pod.
#
# Preemption: the kubelet sends SIGTERM to this script only. If sshd simply went away, the ranks on
# this pod would die with it and the collective checkpoint could not be written. So on SIGTERM:
#   1. the local ranks get SIGTERM at once (heat.py: all ranks agree at their next step and checkpoint
#      together, so the ranks elsewhere follow even before mpirun signals them);
#   2. sshd is kept up until the ranks here have exited, at most SJ_MPI_DRAIN_SECONDS (default 25,
#      inside terminationGracePeriodSeconds 30);
#   3. then sshd is stopped and the script exits 143.
set -uo pipefail

drain_seconds="${SJ_MPI_DRAIN_SECONDS:-25}"
rank_pattern="${SJ_MPI_RANK_PATTERN:-/app/heat.py}"
sshd_dir=/tmp/sshd
sshd_config=/etc/ssh/sshd_config.mpi

log() { printf '%s worker-entrypoint: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

mkdir -p "${sshd_dir}"
if [[ ! -f "${sshd_dir}/ssh_host_ed25519_key" ]]; then
    ssh-keygen -q -t ed25519 -N '' -f "${sshd_dir}/ssh_host_ed25519_key"
fi

/usr/sbin/sshd -D -e -f "${sshd_config}" &
sshd_pid=$!
log "sshd started (pid ${sshd_pid}, port 2222)"

local_ranks() { pgrep -u "$(id -u)" -f -- "${rank_pattern}" || true; }

on_term() {
    log "SIGTERM: asking the local ranks to checkpoint"
    local pids
    pids="$(local_ranks)"
    if [[ -n "${pids}" ]]; then
        # shellcheck disable=SC2086  # one pid per word
        kill -TERM ${pids} 2>/dev/null || true
    fi
    local deadline=$((SECONDS + drain_seconds))
    while [[ -n "$(local_ranks)" ]] && ((SECONDS < deadline)); do
        sleep 0.5
    done
    if [[ -n "$(local_ranks)" ]]; then
        log "ranks still running after ${drain_seconds}s; stopping sshd anyway"
    else
        log "local ranks have exited"
    fi
    kill -TERM "${sshd_pid}" 2>/dev/null || true
    wait "${sshd_pid}" 2>/dev/null
    exit 143
}
trap on_term TERM INT

# `wait` returns early when a trapped signal arrives; the trap then ends the script.
wait "${sshd_pid}"
status=$?
log "sshd exited with ${status}"
exit "${status}"
