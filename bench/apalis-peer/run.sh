#!/usr/bin/env bash
# Builds (release) and runs the apalis-postgres peer at 1, 4, 16 workers, N jobs each,
# each run in a fresh database that is dropped afterwards.
# Usage: bench/apalis-peer/run.sh [N] [MODE]   (MODE: concurrency (default) | workers)
# Env: PGHOST/PGPORT/PGUSER (defaults 127.0.0.1/5432/postgres), POLL_MS (default 5).
set -euo pipefail
cd "$(dirname "$0")"
N="${1:-20000}"
MODE="${2:-concurrency}"
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
POLL_MS="${POLL_MS:-5}"
export CARGO_TARGET_DIR="$PWD/target"
cargo build --release --quiet
for W in 1 4 16; do
  DB="apalis_bench_${RANDOM}${RANDOM}"
  createdb "$DB"
  ./target/release/apalis-peer --database-url "postgres://$PGUSER@$PGHOST:$PGPORT/$DB" \
      --jobs "$N" --workers "$W" --mode "$MODE" --poll-ms "$POLL_MS" || echo "apalis-peer workers=$W FAILED"
  dropdb "$DB"
done
