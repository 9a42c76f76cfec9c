#!/usr/bin/env bash
# tmux check of the terminal app, end to end in a real terminal:
#   build a fresh demo ledger with three claims waiting, open it in tmux, approve the three in
#   bulk (review screen, mark all, approve), then retract a fact from the blast radius tree
#   (choose it, enter on its node, t, a reason), by keys alone; open the live timeline and see
#   an event another process appends appear on it; quit, and find the three confirm events
#   and the retract event in the ledger.
#
#   bash tests/tmux_check.sh            (PYTHON=/path/to/python to choose the interpreter)
# Exit 0: all four events were found; 1: one was not; 2: tmux is not installed.
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
# COLUMNS/LINES from the caller (a test runner's worker sets them) would override the pane's size.
APP="env -u CUSTODY_LEDGER -u CUSTODY_POLICY -u COLUMNS -u LINES $PYTHON -m custody_app"
# The demo ledger, plus two more claims, so three wait for review.
$APP --demo --no-tui --ledger "$WORK/demo.db" >/dev/null
cat > "$WORK/claims.jsonl" <<'JSONL'
{"op": "assert", "subject": "acct:3001", "predicate": "tier", "value": "gold", "actor": "agent:helper", "cause": {"kind": "message", "ref": "tmux-1"}}
{"op": "assert", "subject": "acct:3002", "predicate": "tier", "value": "silver", "actor": "agent:helper", "cause": {"kind": "message", "ref": "tmux-2"}}
JSONL
$APP --batch "$WORK/claims.jsonl" --ledger "$WORK/demo.db" >/dev/null
CLAIMS="$($APP queue --json --ledger "$WORK/demo.db" | "$PYTHON" -c 'import json, sys; print(" ".join(i["fact"]["fact_id"] for i in json.load(sys.stdin)["items"]))')"
[ "$(echo "$CLAIMS" | wc -w)" -eq 3 ] || { echo "tmux_check: expected 3 claims, got: $CLAIMS" >&2; exit 1; }
TARGET="$($APP beliefs --subject acct:1042 --predicate plan --json --ledger "$WORK/demo.db" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["facts"][0]["fact_id"])')"

tmux new-session -d -s "$SESSION" -x 170 -y 40 \
    "$APP '$WORK/demo.db' --reviewer '$REVIEWER'; sleep 30"
wait_for "now (live)" 60

# 1. Approve the three claims in bulk: review screen, mark all, approve, a reason.
tmux send-keys -t "$SESSION" 2
wait_for "reviewing as $REVIEWER"
wait_for "3 waiting ·"
echo "tmux_check: approving all of $CLAIMS as $REVIEWER"
tmux send-keys -t "$SESSION" M
wait_for "3 marked"
tmux send-keys -t "$SESSION" a
wait_for "Approve 3 marked rows"
tmux send-keys -t "$SESSION" "approved from tmux" Enter
wait_for "approved 3 fact(s)"
echo "---- pane after approving ----"
pane
echo "------------------------------"

# 2. Retract a fact from the blast tree: blast screen, / and its id, enter on the root node
#    opens the fact, t and a reason retracts it.
tmux send-keys -t "$SESSION" 6
wait_for "no fact chosen"
tmux send-keys -t "$SESSION" /
tmux send-keys -t "$SESSION" -l "$TARGET"
tmux send-keys -t "$SESSION" Enter
wait_for "root $TARGET"
tmux send-keys -t "$SESSION" Enter
wait_for "Actions"
tmux send-keys -t "$SESSION" t
wait_for "Retract $TARGET"
tmux send-keys -t "$SESSION" "retracted from the blast tree" Enter
wait_for "now retracted"
echo "---- pane after retracting ----"
pane
echo "-------------------------------"
# 3. The live timeline: open it (8), append from another process, and the row appears there
#    without a key being pressed.
tmux send-keys -t "$SESSION" 8
wait_for "live: newest first"
cat > "$WORK/live.jsonl" <<'JSONL'
{"op": "assert", "subject": "acct:tmux-live", "predicate": "plan", "value": "pro", "actor": "agent:helper", "cause": {"kind": "message", "ref": "tmux-live"}}
JSONL
$APP --batch "$WORK/live.jsonl" --ledger "$WORK/demo.db" >/dev/null
wait_for "acct:tmux-live" 30
echo "---- pane of the timeline after another process appended ----"
pane
echo "--------------------------------------------------------------"
tmux send-keys -t "$SESSION" C-q
sleep 0.5

export CLAIMS TARGET LEDGER="$WORK/demo.db"
if "$PYTHON" - "$REVIEWER" <<'PY'
import os, sys
from custody_app import Ledger

reviewer, ok = sys.argv[1], True
with Ledger.open(os.environ["LEDGER"], readonly=True) as ledger:
    for fact in os.environ["CLAIMS"].split():
        events = ledger.history(fact).model_dump()["events"]
        found = [e for e in events if e["kind"] == "confirm" and e["actor"] == reviewer]
        good = bool(found) and found[0].get("reason") == "approved from tmux"
        print(f"tmux_check: {fact}: confirm by {reviewer}: {'yes' if good else 'MISSING'}")
        ok = ok and good
    target = os.environ["TARGET"]
    events = ledger.history(target).model_dump()["events"]
    retracts = [e for e in events if e["kind"] == "retract" and e["actor"] == reviewer]
    good = bool(retracts) and retracts[0].get("reason") == "retracted from the blast tree"
    print(f"tmux_check: {target}: retract by {reviewer} from the blast tree: "
          f"{'yes' if good else 'MISSING'}")
sys.exit(0 if ok and good else 1)
PY
then
    echo "tmux_check: PASS"
else
    echo "tmux_check: FAIL" >&2
    exit 1
fi
