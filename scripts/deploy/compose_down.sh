#!/usr/bin/env bash
# Takes a compose project of deploy/docker down under podman, quietly: its
# containers, with -v its volumes (the keys), and its network. podman-compose
# 1.0's `down` stops every service of the file, also those never started (the
# other profiles), printing a "no such container" error for each, and leaves
# the network behind; this removes what exists and prints nothing unless
# something fails. (podman itself warns that it cannot remove a healthcheck's
# systemd timer where no systemd runs: that line, and only that, is left out.)
#
#   bash scripts/deploy/compose_down.sh PROJECT [-v]
set -euo pipefail
project=${1:?usage: compose_down.sh PROJECT [-v]}
volumes=${2:-}
quiet() { # runs "$@" with stdout dropped and podman's systemd-timer warning left out
    local rc=0
    "$@" >/dev/null 2> >(grep -v 'unable to get systemd connection to remove healthchecks' >&2) || rc=$?
    wait
    return $rc
}
mapfile -t ids < <(podman ps -aq --filter "label=io.podman.compose.project=$project")
[ ${#ids[@]} -eq 0 ] || quiet podman rm -f -t 10 "${ids[@]}"
if [ "$volumes" = -v ]; then
    mapfile -t vols < <(podman volume ls -q --filter "label=io.podman.compose.project=$project")
    [ ${#vols[@]} -eq 0 ] || quiet podman volume rm -f "${vols[@]}"
fi
! podman network exists "${project}_default" || quiet podman network rm -f "${project}_default"
