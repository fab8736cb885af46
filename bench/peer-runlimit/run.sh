#!/usr/bin/env bash
# One sitting of the Postgres comparison (issue 14, item 4): tollgate's
# Postgres store, the raw-SQL ceiling and runlimit-postgres on ONE private
# Postgres server, then tollgate's SQLite and Redis figures beside them.
#
# Usage (from anywhere in the repository):
#   bench/peer-runlimit/run.sh [SECONDS] [ROUNDS]      # defaults: 3 3
# Environment:
#   NO_BUILD=1    use the binaries already built
#   NO_OTHERS=1   skip the SQLite and Redis runs
#   PG_BIN=DIR    Postgres server binaries (default: the newest /usr/lib/postgresql/*/bin)
#
# What it does:
# - starts a private Postgres (initdb + pg_ctl in a temporary directory, a
#   free loopback port, never 5432; fsync on, synchronous_commit on: the
#   settings of crates/test-support's postgres_server), and when root runs
#   it as the postgres user (initdb refuses root);
# - warms both sides up (1 s each, not reported), then for ROUNDS rounds runs
#   tollgate's throughput example (tollgate and raw SQL, alternating inside)
#   and the peer back to back against that server, the order swapped every
#   round, SECONDS per measured case (the peer twice: with sqlx's default
#   pool, which pings every connection it hands out, and without the ping); every measured case runs 50 callers
#   over 10,000 principals with the same four windows and maxima;
# - prints each round's rows, then medians over the rounds with each
#   figure's ratio to the raw ceiling of the same limits;
# - starts a private redis-server on another free port and runs
#   tollgate-bench against it and against a fresh SQLite file per case (1
#   and 4 limits, count and reserve);
# - stops both servers and removes the directory, however it ends.
set -euo pipefail

seconds=${1:-3}
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [ -z "${NO_BUILD:-}" ]; then
  (cd "$root" && cargo build --release -p tollgate-postgres --example throughput)
  (cd "$root" && cargo build --release -p tollgate-bench)
  (cd "$here" && cargo build --release --locked)
fi
example=$root/target/release/examples/throughput
peer=$here/target/release/peer-runlimit
bench=$root/target/release/tollgate-bench
for b in "$example" "$peer" "$bench"; do
  [ -x "$b" ] || { echo "run.sh: $b is missing (run without NO_BUILD)" >&2; exit 1; }
done

bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
[ -x "$bin/initdb" ] || { echo "run.sh: no Postgres server binaries (apt-get install postgresql)" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/peer-runlimit-XXXXXX")
as_pg=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$dir"
  as_pg=(runuser -u postgres --)
fi
redis_pid=
cleanup() {
  "${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
  rm -rf -- "$dir"
}
trap cleanup EXIT

"${as_pg[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C \
  --no-sync --no-instructions >/dev/null
port=$(free_port)
[ "$port" != 5432 ] || port=$(free_port)
"${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -o \
  "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=200 -c shared_buffers=32MB" \
  start >/dev/null
url=postgres://postgres@127.0.0.1:$port/postgres
export TOLLGATE_BENCH_POSTGRES_URL=$url

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores; $("$bin/postgres" --version) on 127.0.0.1:$port"
echo "# load before: $(uptime)"
echo "# $seconds s per case, $rounds rounds, sides swapped every round"

"$example" 1 1 >/dev/null
"$peer" 1 1 >/dev/null

rows=$dir/rows
: >"$rows"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(example peer nop); else order=(nop peer example); fi
  for side in "${order[@]}"; do
    case $side in
      example) out=$("$example" "$seconds" 1) ;;
      peer) out=$("$peer" "$seconds" 1) ;;
      nop) out=$(PEER_NO_PING=1 "$peer" "$seconds" 1) ;;
    esac
    echo "$out" | grep -E '^\| [0-9]' | sed "s/^/round $r /" | tee -a "$rows"
    echo "$out" | grep -v -E '^\||^[0-9]+ callers' || true
  done
  echo "# load after round $r: $(uptime | sed 's/.*load/load/')"
done

echo
echo "Medians over $rounds rounds (checks/s; ratio to the raw ceiling of the same limits and op;"
echo "runlimit's all-or-nothing batch against the raw reservation):"
python3 - "$rows" <<'EOF'
import statistics, sys
from collections import defaultdict
rates, p99, seen = defaultdict(list), defaultdict(list), defaultdict(int)
for line in open(sys.argv[1]):
    round_, rest = line.split("|", 1)
    cells = [c.strip() for c in rest.split("|")[:-1]]
    limits, op, path, rate, _median, _p50, q99 = cells
    # The example measures the 4-limit raw reservation twice a round: against
    # tollgate, then against the pipelined transaction ("Raw#2").
    seen[(round_, limits, op, path)] += 1
    if seen[(round_, limits, op, path)] > 1:
        path += "#2"
    rates[(limits, op, path)].append(float(rate))
    p99[(limits, op, path)].append(q99)
def median(key):
    return statistics.median(rates[key])
def raw_of(key):
    limits, op, path = key
    if op == "CheckAll":
        return (limits, "Reserve", "Raw")
    if path == "RawTransaction":
        return (limits, op, "Raw#2")
    if path.startswith("Raw"):
        return key
    return (limits, op, "Raw")
ops = {"Count": 0, "Reserve": 1, "CheckAll": 2}
paths = {"Tollgate": 0, "Raw": 1, "Raw#2": 2, "RawTransaction": 3}
print("| limits | op | path | checks/s per round | median | ratio to raw | p99 per round |")
print("|---|---|---|---|---|---|---|")
for key in sorted(rates, key=lambda k: (int(k[0]), ops.get(k[1], 9), paths.get(k[2], 9), k[2])):
    limits, op, path = key
    raw = raw_of(key)
    ratio = f"{median(key) / median(raw):.2f}" if raw in rates and key != raw else "-"
    per = " / ".join(f"{r:.0f}" for r in rates[key])
    print(f"| {limits} | {op} | {path} | {per} | {median(key):.0f} | {ratio} | {' / '.join(p99[key])} |")
EOF

if [ -z "${NO_OTHERS:-}" ]; then
  redis_port=$(free_port)
  [ "$redis_port" != 6379 ] || redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  echo
  echo "# $(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$redis_port; load: $(uptime | sed 's/.*load/load/')"
  common=(--concurrency 50 --keys 10000 --duration "$seconds" --rounds "$rounds")
  for kind in redis sqlite; do
    for mode in count reserve; do
      for limits in 1 4; do
        # A fresh SQLite file per case.
        if [ $kind = redis ]; then store=redis://127.0.0.1:$redis_port; else store=sqlite:$dir/$mode-$limits.sqlite3; fi
        echo "## tollgate-bench --store ${store%%:*}:… --limits $limits --mode $mode ${common[*]}"
        "$bench" --store "$store" --limits "$limits" --mode "$mode" "${common[@]}" |
          grep -E '^median|^tollgate / raw|^tollgate |^raw ' || true
      done
    done
  done
  echo "# load after: $(uptime | sed 's/.*load/load/')"
fi
