#!/usr/bin/env bash
# Device call: setup, rows check, then bench-overhead (HEAD's) against four servers, alternately:
# before = 52ebbe3 (+engine.diff), mid = 5b876b1 (GPU path, guessed bursts), after = HEAD (announced
# bursts), fast = HEAD with httptools + uvloop importable (uvicorn then uses them).
set -u
G=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( 585 - $(el) )); }
source "$G/env.sh"
[ -f /tmp/llama-site/.done ] && [ -f /tmp/specdata/.done ] || { mkdir -p /tmp/setuplogs; bash "$G/setup.sh" /tmp/setuplogs > "$OUT/setup.txt" 2>&1; }
echo "setup done at $(el) s"
export PYTHONPATH=/tmp/llama-site:/tmp/site SPEC_DATA_DIR=/tmp/specdata
M=/tmp/specdata/models
for d in project before; do python3 "$G/catalogue.py" $M "$G/$d/utils/embedded/store/models.json" >/dev/null; done
python3 -m pip install -q --no-index --no-deps --target /tmp/fast "$G"/whl_fast/*.whl > /dev/null 2>&1
mkdir -p /tmp/pre && echo "import llama_cpp" > /tmp/pre/sitecustomize.py
(cd "$G/before" && SPEC_GPU_LAYERS=-1 PYTHONPATH=/tmp/pre:$PYTHONPATH nohup python3 cli.py serve --port 11501 > /tmp/before.log 2>&1 &)
(cd "$G/project" && PYTHONPATH=/tmp/fast:$PYTHONPATH nohup python3 cli.py serve --port 11504 > /tmp/fast.log 2>&1 &)
for p in 11501 11504; do for i in $(seq 60); do curl -sf localhost:$p/api/version >/dev/null && break; sleep 1; done; done
echo "servers up at $(el) s"
T=synth-qwen2.5:7b-q8; D=synth-qwen2.5:0.5b-q8
for run in 1 2 3; do
  for side in before:11501 after:11504; do
    name=${side%%:*}; port=${side##*:}
    [ $(left) -lt 40 ] && break 2
    echo "== $name run $run at $(el) s"
    (cd "$G/project" && timeout $(left) python3 cli.py bench-overhead --host http://127.0.0.1:$port --target $T --draft $D \
       --context 233 4000 --repeat 5; cd "$G/project" && PYTHONPATH=/tmp/fast:$PYTHONPATH python3 -c "import uvicorn.config as c, importlib.util as u; print(\"httptools\", bool(u.find_spec(\"httptools\")), \"uvloop\", bool(u.find_spec(\"uvloop\")))") > /tmp/o.txt 2>&1
    { echo "######## $name run $run"; grep -v "round . of" /tmp/o.txt; } >> "$OUT/overhead-all.txt"
    grep -E "^ 0.8|lost" /tmp/o.txt
  done
done
curl -s localhost:11504/api/ps > "$OUT/ps-after.json"; cat "$OUT/ps-after.json"; echo
pkill -f "cli.py serve"
echo "end at $(el) s"
