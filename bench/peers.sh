#!/usr/bin/env bash
# Countersign against its peers, side by side, in one run (issue 9).
#
# Copies the peer benchmark (pi and the Vercel AI SDK; ../shared/peers, read-only) to a temporary
# folder, runs its run.sh (npm ci, then its Node 24 from npm), runs Countersign's same cases
# (bench/cmd/load), prints the comparison with the ratios Countersign/peer, writes it into the
# generated block of bench/RESULTS.md (date, machine, load, versions) and saves every raw line in
# bench/runs/<date>.jsonl.
#
#   bench/peers.sh [RUNS]        RUNS defaults to 3 (medians of 3 runs, as the peers' RESULTS.md)
#   PEERS=/path/to/peers bench/peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-${RUNS:-3}}"
peers="${PEERS:-../shared/peers}"
go="${GO:-go}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -R "$peers" "$tmp/peers"
chmod -R u+w "$tmp/peers"

echo "== peers: $peers ($runs runs)" >&2
"$tmp/peers/run.sh" "$runs" | tee "$tmp/peers.jsonl"

echo "== Countersign ($runs runs)" >&2
"$go" build -o "$tmp/load" ./bench/cmd/load
"$go" build -o "$tmp/report" ./bench/cmd/report
# Under with-postgres.sh: the replicas case needs a PostgreSQL server (a throwaway one unless
# COUNTERSIGN_TEST_POSTGRES is set; without Debian's postgresql the case says it was skipped).
scripts/with-postgres.sh "$tmp/load" -runs "$runs" | tee "$tmp/countersign.jsonl"

echo "== side by side" >&2
"$tmp/report" -countersign "$tmp/countersign.jsonl" -peers "$tmp/peers.jsonl" \
  -results bench/RESULTS.md -raw "bench/runs/$(date -u +%F).jsonl"
