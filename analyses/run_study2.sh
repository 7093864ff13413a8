#!/usr/bin/env bash
# Study 2 (issue 44) in the background, resumable: re-run after any stop, on any machine.
#   analyses/run_study2.sh COMMIT [ROOT]
# Pins a detached worktree at COMMIT (the code the study runs; its design.json must equal the committed
# pre-registration, which analyses.confirm2 run checks), prepares the corpus once (its hashes checked
# against corpus.json), re-runs the LayerNorm Scaling pilot on the representative validation sample, then
# runs study 2's queue two runs at a time. Results go to THIS checkout's analyses/results/ (commit them).
# Shield it from other jobs with its autogroup: echo 0 > /proc/$(pgrep -f run_study2.sh)/autogroup
set -u
commit=${1:?usage: analyses/run_study2.sh COMMIT [ROOT]}
root=${2:-$PWD/runs/study2}
here=$(cd "$(dirname "$0")/.." && pwd)
tree="$root/tree"
mkdir -p "$root"
[ -d "$tree" ] || git -C "$here" worktree add --detach "$tree" "$commit"
cd "$tree" || exit 1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$tree"
py="$here/.venv/bin/python"
"$py" -m analyses.confirm prepare --root "$root" --results "$here/analyses/results/confirm2"
"$py" -m analyses.lns_pilot run --data "$root/data-env-bpe2048" --root "$root/lns_pilot"
"$py" -m analyses.confirm2 run --root "$root" --results "$here/analyses/results/confirm2"
