#!/usr/bin/env bash
# Device call: setup, then the project's own `cli.py bench` (whole speculative answers through the
# real loop and controller) on the synthetic 7B target: plain vs prompt lookup vs the 0.5B draft.
set -u
G=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source "$G/env.sh"
[ -f /tmp/llama-site/.done ] && [ -f /tmp/specdata/.done ] || { mkdir -p /tmp/setuplogs; bash "$G/setup.sh" /tmp/setuplogs > "$OUT/setup.txt" 2>&1; }
echo "setup done at $(el) s"
python3 -m pip install -q --no-index --no-deps --target /tmp/fast "$G"/whl_fast/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/fast:/tmp/llama-site:/tmp/site SPEC_DATA_DIR=/tmp/specdata
python3 "$G/catalogue.py" /tmp/specdata/models "$G/project/utils/embedded/store/models.json" >/dev/null
cd "$G/project"
timeout $(( 570 - $(el) )) python3 cli.py bench --target synth-qwen2.5:7b-q8 --draft lookup --draft synth-qwen2.5:0.5b-q8 \
  --limit 2 --max-tokens 128 --repeat 2 --out /tmp/bench > "$OUT/bench-stdout.txt" 2>&1
echo "bench rc=$? at $(el) s"; tail -40 "$OUT/bench-stdout.txt"
ls /tmp/bench; cp /tmp/bench/*.md "$OUT/" 2>/dev/null; cp /tmp/bench/results.json "$OUT/" 2>/dev/null
echo "end at $(el) s"
