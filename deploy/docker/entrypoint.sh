#!/bin/sh
# sw-entrypoint: waits until the files named in SW_WAIT_FOR (space-separated)
# exist, then runs the command. compose.yaml's services wait this way for the
# keys the one-shot init service writes into the keys volume, whatever order
# the compose tool starts them in (Docker's depends_on conditions do the same;
# podman-compose 1.0 ignores them). SW_WAIT_S bounds the wait (default 300).
set -eu
waited=0
limit=${SW_WAIT_S:-300}
for f in ${SW_WAIT_FOR:-}; do
    while [ ! -e "$f" ]; do
        if [ "$waited" -ge "$limit" ]; then
            echo "sw-entrypoint: $f did not appear in ${limit} s: is the init service done? (docker compose logs init)" >&2
            exit 1
        fi
        [ $((waited % 10)) -eq 0 ] && echo "sw-entrypoint: waiting for $f (${waited} s)" >&2
        sleep 1
        waited=$((waited + 1))
    done
done
exec "$@"
