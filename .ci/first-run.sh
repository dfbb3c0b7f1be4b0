#!/usr/bin/env bash
# The README's first command, run as a newcomer runs it: a fresh clone of this checkout's HEAD in a
# temporary directory with no shared/ beside it, a fresh virtualenv, then exactly
#     python3 -m pip install -e '.[demo]' && warmscale demo
# Fails unless that exits 0, writes its PNG, prints its table and summary, and shows no traceback.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
head="$(git -C "$repo" rev-parse HEAD)"
work="$(mktemp -d "${TMPDIR:-/tmp}/warmscale-first-run.XXXXXX")"
trap 'rm -rf "$work"' EXIT

git clone -q --no-checkout "$repo" "$work/warmscale"
git -C "$work/warmscale" checkout -q --detach "$head"
if [ -e "$work/shared" ]; then echo "first run: $work/shared must not exist" >&2; exit 1; fi
python3 -m venv "$work/venv"

start=$(date +%s)
set +e
(
  cd "$work/warmscale"
  # shellcheck disable=SC1091
  source "$work/venv/bin/activate"
  unset WARMSCALE_SHARED PYTHONPATH PYTHONHOME
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  bash -c "python3 -m pip install -e '.[demo]' && warmscale demo"
) >"$work/stdout" 2>"$work/stderr"
rc=$?
set -e
took=$(( $(date +%s) - start ))

fail() {
  echo "first run FAILED: $*" >&2
  echo "--- stdout (tail) ---" >&2; tail -n 40 "$work/stdout" >&2
  echo "--- stderr (tail) ---" >&2; tail -n 40 "$work/stderr" >&2
  exit 1
}
[ "$rc" -eq 0 ] || fail "exit code $rc"
png="$work/warmscale/warmscale-demo.png"
[ -s "$png" ] || fail "no $png"
[ "$(head -c 8 "$png" | od -An -c | tr -d ' ')" = '211PNG\r\n032\n' ] || fail "$png is not a PNG"
grep -q "today's setup" "$work/stdout" || fail "no table"
grep -Eq "^today's setup +[0-9.]+% +[0-9,]+ " "$work/stdout" || fail "no summary line for today's setup"
grep -Eq "^warmscale +[0-9.]+% +[0-9,]+ " "$work/stdout" || fail "no summary line for warmscale"
grep -q "GPU-seconds" "$work/stdout" || fail "no GPU-seconds in the summary"
if grep -q "Traceback" "$work/stdout" "$work/stderr"; then fail "a traceback was printed"; fi
if grep -q '^{"ts"' "$work/stdout"; then fail "log lines in the table"; fi
echo "first run OK in ${took}s (install + demo, fresh clone of ${head:0:12}, no shared/):"
sed -n '/^[0-9,]* requests in/,$p' "$work/stdout"
