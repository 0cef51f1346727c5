#!/usr/bin/env bash
# readme-team-recipe.sh [BINARY]: follows README.md's "Run it for a team" on a fresh PostgreSQL 15
# cluster and checks that it starts two replicas serving one team (issue 33, acceptance 6).
#
# The recipe's sh block is read from README.md and run as written, line by line, by bash. Only
# what the recipe leaves to the reader is replaced, each by a sed substitution below: the
# database's host and port (db.internal:5432 → this cluster; sslmode=require → disable, the
# cluster has no certificate), /etc/countersign and /srv/workspace (→ a temporary folder), the
# owner token (… → a random one), the replicas' addresses (10.0.0.1x:port → 127.0.0.1 and a free
# port) and ./countersign (→ BINARY, default: built from ./cmd/web). The replicas start in the
# background, the second once the first has printed its login line (the first makes the key
# file the second reads). Then: both answer ready on /readyz, and a session made on one is
# served by the other. Everything is removed at the end, whatever happened.
#
# Needs Debian's postgresql-15 (/usr/lib/postgresql/15/bin). As root, the cluster runs as the
# postgres user (PostgreSQL refuses root). Exit 0: the recipe works; 1: it does not; 2: cannot run.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
pgbin=/usr/lib/postgresql/15/bin
if [[ ! -x "$pgbin/initdb" ]]; then
  echo "readme-team-recipe: PostgreSQL 15 is not installed ($pgbin/initdb)" >&2
  exit 2
fi

work="$(mktemp -d /tmp/countersign-recipe.XXXXXX)"
chmod 0711 "$work" # the postgres user reaches its folder inside
mkdir -p "$work/pg" "$work/etc" "$work/workspace"
as=()
if [[ $(id -u) -eq 0 ]]; then
  chown postgres: "$work/pg"
  as=(runuser -u postgres --)
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "${as[@]}" "$pgbin/pg_ctl" -D "$work/pg/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

binary="${1:-}"
if [[ -z "$binary" ]]; then
  binary="$work/countersign"
  (cd "$root" && CGO_ENABLED=0 go build -o "$binary" ./cmd/web)
fi

port="$(free_port)"
"${as[@]}" "$pgbin/initdb" -D "$work/pg/data" -A trust -U postgres --no-sync >"$work/pg/initdb.log" 2>&1 ||
  { cat "$work/pg/initdb.log" >&2; exit 2; }
"${as[@]}" "$pgbin/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w \
  -o "-p $port -k $work/pg -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null ||
  { cat "$work/pg/log" >&2; exit 2; }
echo "readme-team-recipe: PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') at 127.0.0.1:$port" >&2
# The recipe's psql and createdb run "as a PostgreSQL superuser": this cluster's, through libpq's
# variables, so the lines themselves stay as written.
export PATH="$pgbin:$PATH" PGHOST=127.0.0.1 PGPORT="$port" PGUSER=postgres PGDATABASE=postgres

# The first sh block under "## Run it for a team".
block="$(awk '
  /^## Run it for a team$/ { in_section = 1; next }
  in_section && /^## / { exit }
  in_section && !in_block && /^```sh$/ { in_block = 1; next }
  in_block && /^```$/ { exit }
  in_block { print }
' "$root/README.md")"
if [[ -z "$block" ]]; then
  echo 'readme-team-recipe: README.md has no sh block under "## Run it for a team"' >&2
  exit 1
fi

token="recipe-$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')"
declare -A addr
for a in $(grep -oE '10\.0\.0\.[0-9]+:[0-9]+' <<<"$block" | sort -u); do
  addr[$a]="127.0.0.1:$(free_port)"
done

# wait_login N: waits for replica N's login line (or its death), for 30 s at most.
wait_login() {
  local n="$1" pid="${pids[$(($1 - 1))]}"
  for _ in $(seq 300); do
    if grep -q '^Countersign listening on http://' "$work/replica$n.out" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "readme-team-recipe: replica $n exited:" >&2
      cat "$work/replica$n.err" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "readme-team-recipe: replica $n printed no login line within 30 s" >&2
  cat "$work/replica$n.err" >&2
  exit 1
}

script="$work/recipe.sh"
{
  echo 'set -euo pipefail'
  n=0
  while IFS= read -r line; do
    line="$(sed -e "s|db\.internal:5432|127.0.0.1:$port|g" -e 's|sslmode=require|sslmode=disable|g' \
      -e "s|/etc/countersign/|$work/etc/|g" -e "s|/srv/workspace|$work/workspace|g" \
      -e "s|COUNTERSIGN_TOKEN=…|COUNTERSIGN_TOKEN=$token|" <<<"$line")"
    for a in "${!addr[@]}"; do line="${line//$a/${addr[$a]}}"; done
    if [[ "$line" == "./countersign "* ]]; then
      n=$((n + 1))
      line="${line%%#*}"
      echo "\"$binary\" ${line#./countersign } >\"$work/replica$n.out\" 2>\"$work/replica$n.err\" &"
      echo 'pids+=($!)'
      echo "wait_login $n"
    else
      echo "$line"
    fi
  done <<<"$block"
  echo "replicas=$n"
} >"$script"

# shellcheck source=/dev/null
source "$script"
if [[ "$replicas" -ne 2 ]]; then
  echo "readme-team-recipe: the recipe starts $replicas replicas, want 2" >&2
  exit 1
fi

bases=()
for n in 1 2; do
  bases+=("$(grep -oE '^Countersign listening on http://[0-9.:]+' "$work/replica$n.out" | sed 's|^Countersign listening on ||')")
done
for base in "${bases[@]}"; do
  ready="$(curl -sS "$base/readyz")"
  if [[ "$ready" != ready ]]; then
    echo "readme-team-recipe: $base/readyz answered: $ready" >&2
    exit 1
  fi
done
auth=(-H "Authorization: Bearer $COUNTERSIGN_TOKEN" -H 'Content-Type: application/json')
id="$(curl -sS -f "${auth[@]}" -d '{"title":"recipe","model":"faux:demo"}' "${bases[0]}/api/sessions" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
if ! curl -sS -f "${auth[@]}" "${bases[1]}/api/sessions/$id" | grep -q '"recipe"'; then
  echo "readme-team-recipe: replica 2 does not serve the session made on replica 1" >&2
  exit 1
fi
echo "readme-team-recipe: ok: the README's team recipe starts two replicas serving one team on PostgreSQL 15"
