#!/bin/sh
# The DeltaMQ image's entrypoint. With DELTAMQ_USER and DELTAMQ_PASSWORD set (the
# broker's service in docker-compose.yml), first make sure the broker's password
# file under DELTAMQ_DATA_DIR (default /data) has that user, an administrator, with
# that password: guest logs in from loopback only, and the other containers are not
# on the broker's loopback. Then run the command (deltamq serve, spark-class,
# jupyter lab, ...).
set -eu
if [ -n "${DELTAMQ_USER:-}" ] && [ -n "${DELTAMQ_PASSWORD:-}" ]; then
    data_dir="${DELTAMQ_DATA_DIR:-/data}"
    mkdir -p "$data_dir"
    if deltamq user list --data-dir "$data_dir" 2>/dev/null | cut -f1 | grep -qx "$DELTAMQ_USER"; then
        printf '%s\n' "$DELTAMQ_PASSWORD" | deltamq user passwd "$DELTAMQ_USER" --data-dir "$data_dir" >/dev/null
    else
        printf '%s\n' "$DELTAMQ_PASSWORD" | deltamq user add "$DELTAMQ_USER" --admin --data-dir "$data_dir" >/dev/null
    fi
fi
exec "$@"
