#!/usr/bin/env bash
# with-postgres.sh CMD…: runs CMD with COUNTERSIGN_TEST_POSTGRES set to the URL of a throwaway
# PostgreSQL cluster (issue 21: the PostgreSQL store's tests need a real server, never a mock).
#
# - COUNTERSIGN_TEST_POSTGRES already set: CMD runs against that server, nothing is started.
# - Else, when Debian's postgresql binaries are here (/usr/lib/postgresql/*/bin, or initdb on the
#   PATH): initdb into a temporary folder (as the postgres user via runuser when run as root,
#   since PostgreSQL refuses to run as root; as yourself otherwise), pg_ctl start on a free port
#   with its log in that folder (-l: a server holding our stdout would keep a caller waiting on
#   its pipes forever; fsync off unless PG_FSYNC=on, as the replicas benchmark's second setting),
#   CMD, then pg_ctl -m immediate stop and the folder removed, whatever CMD did.
# - Else: CI=true fails (CI must never skip the PostgreSQL cases; .ci/run installs postgresql),
#   and elsewhere CMD runs without the variable and the PostgreSQL cases say they were skipped.
set -euo pipefail

if [[ -n "${COUNTERSIGN_TEST_POSTGRES:-}" ]]; then
  exec "$@"
fi

bindir=""
for d in /usr/lib/postgresql/*/bin; do
  [[ -x "$d/initdb" ]] && bindir="$d"
done
if [[ -z "$bindir" ]] && command -v initdb >/dev/null 2>&1; then
  bindir="$(dirname "$(command -v initdb)")"
fi
if [[ -z "$bindir" ]]; then
  if [[ "${CI:-}" == "true" ]]; then
    echo "with-postgres: no PostgreSQL server binaries (initdb) found; install Debian's postgresql package" >&2
    exit 1
  fi
  echo "with-postgres: no PostgreSQL server binaries (initdb) found: the PostgreSQL cases will be skipped" >&2
  exec "$@"
fi

dir="$(mktemp -d /tmp/countersign-pg.XXXXXX)"
as=()
if [[ $(id -u) -eq 0 ]]; then
  chown postgres: "$dir"
  as=(runuser -u postgres --)
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))"

stop() {
  "${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

"${as[@]}" "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log" >&2; exit 1; }
"${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=${PG_FSYNC:-off} -c max_connections=200" start >/dev/null ||
  { cat "$dir/log" >&2; exit 1; }

export COUNTERSIGN_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
echo "with-postgres: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $COUNTERSIGN_TEST_POSTGRES (stopped at the end)" >&2
set +e
"$@"
rc=$?
set -e
exit $rc
