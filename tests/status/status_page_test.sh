#!/usr/bin/env bash
# The status page in a real browser, and /metrics through a strict parser.
# Usage: status_page_test.sh ATOLL OUTDIR
# A short run serves --metrics on a free port; curl fetches /metrics, which
# prometheus_text.py parses; headless Chromium loads / until the learners
# appear and both charts have points, and the DOM is checked. The screenshot
# stays as OUTDIR/status_page.png. Exits 77 (skipped) without chromium.
set -euo pipefail
atoll=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$chromium" ]]; then
  echo "SKIPPED: chromium is not installed (scripts/setup installs Debian's chromium)"
  exit 77
fi
command -v curl >/dev/null || { echo "SKIPPED: curl is not installed"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true; }
trap cleanup EXIT
die() {
  echo "FAILED: $*" >&2
  echo "---- run.log" >&2; tail -n 30 "$out/run.log" >&2 || true
  exit 1
}

# Three slow learners on synthetic data (no data files), for 600 s at most;
# the test stops it once it has seen what it wants.
cat > "$out/topology.toml" <<'TOML'
mode = "decoupled"
tokens = 0
seconds = 600
seed = 3
[model]
kind = "mlp"
hidden = [64]
[data]
kind = "synthetic"
features = 32
classes = 10
examples = 8192
[outer]
fragments = 2
sync_every = 50
[checkpoint]
dir = ""
[[learners]]
speed = 0.2
[[learners]]
speed = 0.2
[[learners]]
speed = 0.1
TOML
"$atoll" validate "$out/topology.toml" >/dev/null || die "the test's topology does not validate"
"$atoll" run "$out/topology.toml" --metrics 127.0.0.1:0 --threads 1 --quiet --report "$out/report.json" \
  > "$out/stdout.txt" 2> "$out/run.log" &
pid=$!

port=""
for _ in $(seq 300); do  # up to 30 s to start
  port=$(sed -n 's|.*status page at http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$out/run.log" | head -n 1)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || die "atoll ended before serving"
  sleep 0.1
done
[[ -n "$port" ]] || die "no status page within 30 s"
url="http://127.0.0.1:$port"

# /metrics once learners trained: every metric docs/observing.md lists is there.
for _ in $(seq 300); do
  curl -sf "$url/metrics" > "$out/metrics.txt" || true
  grep -q '^atoll_learner_steps_total{learner="2"} [1-9]' "$out/metrics.txt" && break
  sleep 0.1
done
grep -q '^atoll_learner_steps_total{learner="2"} [1-9]' "$out/metrics.txt" || die "/metrics shows no trained learner 2"
curl -sfI "$url/metrics" | grep -qi '^content-type: text/plain; version=0.0.4' || die "/metrics has the wrong content type"
python3 "$here/prometheus_text.py" "$out/metrics.txt" \
  --require atoll_tokens_total --require atoll_rounds_total --require atoll_pushes_total \
  --require atoll_quorum_size_mean --require atoll_grace_wait_seconds_total --require atoll_goodput_ratio \
  --require atoll_alive_ratio --require atoll_learner_up --require atoll_learner_steps_total \
  --require atoll_learner_tokens_total --require atoll_learner_step_seconds \
  --require atoll_learner_staleness_versions --require atoll_learner_restarts_total \
  --require atoll_fragment_version --require atoll_transfer_bytes_total --require atoll_restarts_total \
  --require atoll_faults_injected_total --require atoll_faults_recovered_total \
  --require atoll_learners_members --require atoll_learners_present --require atoll_joins_total \
  --require atoll_departures_total --require atoll_learner_member \
  || die "/metrics is not valid Prometheus text"
# Read-only: no control without a fault plan and --allow-control.
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/control?action=kill&learner=0")
[[ "$code" == 403 ]] || die "POST /control answered $code, want 403"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/nothing-here")
[[ "$code" == 404 ]] || die "GET /nothing-here answered $code, want 404"

# The page in headless Chromium: wait (bounded) until every learner has a row
# and both charts have points.
browser=("$chromium" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking
         --disable-extensions --no-first-run --user-data-dir="$out/profile" --virtual-time-budget=5000)
ok=""
for attempt in $(seq 10); do
  "${browser[@]}" --dump-dom "$url/" > "$out/dom.html" 2> "$out/chromium.log" || true
  rows=$(grep -o '<tr class="learner" data-id="[0-9]*"' "$out/dom.html" | wc -l)
  up=$(grep -o '<td class="state up">up</td>' "$out/dom.html" | wc -l)
  charts=$(grep -o 'class="series" data-points="[0-9]*"' "$out/dom.html" | sed 's/.*="\([0-9]*\)"/\1/' |
           awk '$1 >= 2' | wc -l)
  if [[ "$rows" == 3 && "$up" -ge 1 && "$charts" -ge 3 ]]; then ok=1; break; fi
  echo "attempt $attempt: $rows learner rows, $up up, $charts lines with points; again" >&2
  sleep 2
done
[[ -n "$ok" ]] || { tail -n 20 "$out/chromium.log" >&2; die "the page did not show 3 learners and charts with points"; }
grep -q 'id="fragments"><span class="frag">fragment 0: v' "$out/dom.html" || die "no fragment versions on the page"
grep -q 'id="present">[0-9] of 3 members</b>' "$out/dom.html" || die "the page does not show the learners present"
grep -q 'id="membership">0 / 0</b>' "$out/dom.html" || die "the page does not show joins and departures"
grep -q '<h1>atoll <span id="mode">decoupled</span> run: <span id="state"[^>]*>running' "$out/dom.html" ||
  die "the page does not say the decoupled run is running"
"${browser[@]}" --window-size=1200,1150 --screenshot="$out/status_page.png" "$url/" >> "$out/chromium.log" 2>&1 || true
[[ -s "$out/status_page.png" ]] || die "no screenshot"

# The run ends in order: SIGINT stops it, the report and its plots are written.
kill -INT "$pid"
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then die "atoll did not stop within 60 s of SIGINT"; fi
wait "$pid" || true
pid=""
for f in report.json report.series.csv report.events.csv report.loss.svg report.learners.svg report.goodput.svg; do
  [[ -s "$out/$f" ]] || die "$f was not written"
done
# A line per learner, and the learners present over time.
[[ $(grep -c '<polyline' "$out/report.learners.svg") == 4 ]] || die "the learners plot does not have 3 lines and the learners present"
echo "status page ok: 3 learners, charts with points; screenshot $out/status_page.png"
