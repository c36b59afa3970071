# Start a throw-away PostgreSQL server on 127.0.0.1 for the tests that need one (sourced by .ci/run).
# Installs Debian's postgresql package when the machine lacks it; exports DEEPSTACK_TEST_POSTGRES;
# the server and its data directory go away when the calling shell exits.
pg_start() {
    if ! ls -d /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null 2>&1 \
            || { echo "postgres: could not install Debian's postgresql package" >&2; return 1; }
    fi
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    PG_USER=postgres
    id "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home "$PG_USER"
    PG_DATA=$(mktemp -d /tmp/deepstack-pg.XXXXXX)
    PG_PORT=${PG_PORT:-55432}
    chown "$PG_USER" "$PG_DATA"
    su "$PG_USER" -s /bin/sh -c "'$PG_BIN/initdb' -D '$PG_DATA/data' -A trust -U postgres" >/dev/null
    su "$PG_USER" -s /bin/sh -c "'$PG_BIN/pg_ctl' -D '$PG_DATA/data' -w -l '$PG_DATA/log' \
        -o '-h 127.0.0.1 -p $PG_PORT -k $PG_DATA' start" >/dev/null
    export DEEPSTACK_TEST_POSTGRES="postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
    trap pg_stop EXIT
    echo "postgres: serving on 127.0.0.1:$PG_PORT"
}

pg_stop() {
    [ -n "${PG_DATA:-}" ] || return 0
    su "$PG_USER" -s /bin/sh -c "'$PG_BIN/pg_ctl' -D '$PG_DATA/data' -m fast stop" >/dev/null 2>&1 || true
    rm -rf "$PG_DATA"
}
