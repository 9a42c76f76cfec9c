#!/usr/bin/env bash
# tmux check of the terminal app, end to end in a real terminal:
#   start `custody-app --demo` (a fresh copy of the sample ledger) in tmux, send the keys that
#   approve the quarantined fact waiting in the review queue, capture the pane, quit, and find
#   the confirm event in the ledger with `custody-app history`.
#
#   bash tests/tmux_check.sh            (PYTHON=/path/to/python to choose the interpreter)
# Exit 0: the confirm was found; 1: it was not; 2: tmux is not installed.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
if ! command -v tmux >/dev/null 2>&1; then
    echo "tmux_check: tmux is not installed (apt-get install -y tmux); nothing checked" >&2
    exit 2
fi

WORK="$(mktemp -d)"
SESSION="custody-check-$$"
REVIEWER="user:tmux-check"
cleanup() { tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

pane() { tmux capture-pane -p -t "$SESSION"; }
wait_for() {  # wait_for TEXT [SECONDS]: poll the pane until TEXT shows
    local deadline=$((SECONDS + ${2:-30}))
    until pane | grep -qF -- "$1"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "tmux_check: timed out waiting for '$1'; the pane shows:" >&2
            pane >&2
            exit 1
        fi
        sleep 0.2
    done
}

cd "$WORK"
tmux new-session -d -s "$SESSION" -x 170 -y 40 \
    "env -u CUSTODY_LEDGER -u CUSTODY_POLICY '$PYTHON' -m custody_app --demo --ledger '$WORK/demo.db' --reviewer '$REVIEWER'; sleep 30"
wait_for "now (live)" 60
tmux send-keys -t "$SESSION" 2
wait_for "reviewing as $REVIEWER"
FACT="$(pane | grep -o 'f_[0-9a-f]\{22\}' | head -1)"
[ -n "$FACT" ] || { echo "tmux_check: no quarantined fact on the review screen" >&2; pane >&2; exit 1; }
echo "tmux_check: approving $FACT as $REVIEWER"
tmux send-keys -t "$SESSION" a
wait_for "Approve $FACT"
tmux send-keys -t "$SESSION" "approved from tmux" Enter
wait_for "approved 1 fact(s)"
echo "---- pane after approving ----"
pane
echo "------------------------------"
tmux send-keys -t "$SESSION" C-q
sleep 0.5

HISTORY="$("$PYTHON" -m custody_app history "$FACT" --json --ledger "$WORK/demo.db")"
export HISTORY
if "$PYTHON" - "$REVIEWER" <<'PY'
import json, os, sys
events = json.loads(os.environ["HISTORY"])["events"]
found = [e for e in events if e["kind"] == "confirm" and e["actor"] == sys.argv[1]]
print(f"tmux_check: history has {len(events)} events; confirm by {sys.argv[1]}: "
      + (f"seq {found[0]['seq']}, reason {found[0].get('reason')!r}" if found else "MISSING"))
sys.exit(0 if found and found[0].get("reason") == "approved from tmux" else 1)
PY
then
    echo "tmux_check: PASS"
else
    echo "tmux_check: FAIL" >&2
    exit 1
fi
