#!/usr/bin/env bash
# pgbench single-row-INSERT ceiling: the queue benchmark compares its throughput with it.
# Usage: bench/pgbench-ceiling.sh [DATABASE_URL] [SECONDS]
# Prints one line per client count: "pgbench clients=C tps=T".
set -euo pipefail
DB="${1:-postgres://postgres@127.0.0.1:5432/test}"
SECS="${2:-15}"
PGBENCH="$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)"
TABLE=pgbench_ceiling_scratch
SCRIPT="$(mktemp --suffix=.sql)"
trap 'rm -f "$SCRIPT"; psql -q "$DB" -c "DROP TABLE IF EXISTS $TABLE" >/dev/null 2>&1 || true' EXIT

# Scratch table shaped roughly like a queue row: id, kind, ~200-byte JSON payload, timestamp.
psql -q -v ON_ERROR_STOP=1 "$DB" <<SQL
DROP TABLE IF EXISTS $TABLE;
CREATE TABLE $TABLE (
  id bigserial PRIMARY KEY,
  kind text NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
SQL
PAD=$(printf 'x%.0s' $(seq 1 150))
cat >"$SCRIPT" <<SQL
INSERT INTO $TABLE (kind, payload) VALUES ('noop', '{"id":12345,"tenant":"tenant-0001","pad":"$PAD"}');
SQL

for C in 1 4 16; do
  J=$(( C < 2 ? C : 2 ))   # 2 cores: at most 2 pgbench threads
  TPS=$("$PGBENCH" -n -f "$SCRIPT" -c "$C" -j "$J" -T "$SECS" "$DB" 2>/dev/null \
        | awk '/^tps = / {print $3; exit}')
  psql -q "$DB" -c "TRUNCATE $TABLE" >/dev/null
  printf 'pgbench clients=%s tps=%.0f\n' "$C" "$TPS"
done
