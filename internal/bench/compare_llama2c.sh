#!/usr/bin/env bash
# compare_llama2c.sh measures pipeshard's f32 decode speed against
# llama2.c's run.c on stories15M in one run, interleaved so that both see
# the same (noisy, shared) machine:
#
#   for each round: run.c 1 thread, pipeshard 1 thread, run.c 2 threads,
#                   pipeshard 2 threads
#
# and prints the median tokens/s of each and the ratio pipeshard/run.c.
#
# Usage:
#   internal/bench/compare_llama2c.sh /path/to/run [rounds] [threads...]
#
# The first argument is a run.c binary you built yourself, outside this
# repository (no llama2.c code lives here), e.g.
#   gcc -Ofast -march=native -fopenmp run.c -lm -o /tmp/llama2c/run
# Environment:
#   PIPESHARD       the pipeshard binary (default: pipeshard on PATH, else
#                   /tmp/ps; build it with `go build -o /tmp/ps .`)
#   PIPESHARD_HOME  where models/stories15M lives (default
#                   /root/.cache/pipeshard)
#
# Same work on both sides: run.c decodes greedily from BOS and stops when
# it samples BOS (token 1) again or after -n steps; its tok/s counts the
# tokens after the first forward pass. pipeshard's decode_tokens_per_s
# counts the same thing (generated tokens after the first), so the script
# first finds where greedy decoding emits BOS and gives pipeshard the same
# number of tokens (-n), and checks that both printed the same text.
set -euo pipefail

runc=${1:?usage: $0 /path/to/run.c-binary [rounds] [threads...]}
runc=$(realpath "$runc")
rounds=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
steps=256

ps=${PIPESHARD:-$(command -v pipeshard || echo /tmp/ps)}
home=${PIPESHARD_HOME:-/root/.cache/pipeshard}
model=$home/models/stories15M/stories15M.bin
[ -f "$model" ] || { echo "missing $model: run \`pipeshard model pull stories15M\`" >&2; exit 1; }
[ -x "$ps" ] || { echo "missing pipeshard binary $ps (set PIPESHARD)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$home/models/stories15M/tokenizer.bin" "$work/tokenizer.bin" # run.c reads ./tokenizer.bin

# ps_run THREADS N: prints pipeshard's JSON result.
ps_run() { "$ps" run --model stories15M --prompt-ids 1 -n "$2" --ignore-eos --threads "$1" --json 2>/dev/null; }
# runc_run THREADS: prints run.c's tok/s; its text goes to $work/runc.txt.
runc_run() {
	(cd "$work" && OMP_NUM_THREADS=$1 "$runc" "$model" -t 0.0 -n "$steps" >runc.txt 2>runc.err) || { cat "$work/runc.err" >&2; return 1; }
	sed -n 's/^achieved tok\/s: //p' "$work/runc.err"
}
json_field() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# How many tokens run.c will produce: up to (not including) the first BOS.
ids=$(ps_run 1 "$steps" | sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p')
n=$(echo "$ids" | tr ',' '\n' | awk '$1 == 1 {print NR; found=1; exit} END {if (!found) print NR}')
# run.c forwards n tokens (positions 0..n-1) when BOS is the n-th; pipeshard
# -n n generates n ids with n forwards at positions 0..n-1.
[ "$n" -le "$steps" ] || n=$steps
runc_run 1 >/dev/null
want=$(ps_run 1 "$((n - 1))" | sed -n 's/.*"text":"\(.*\)"}$/\1/p' | sed 's/\\n/\n/g; s/\\"/"/g')
got=$(cat "$work/runc.txt")
if [ "$(printf %s "$want" | tr -d ' \n')" != "$(printf %s "$got" | tr -d ' \n')" ]; then
	echo "warning: run.c and pipeshard printed different text; the comparison may not be like for like" >&2
fi

echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "run.c: $runc; pipeshard: $ps (repository HEAD $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo "greedy from BOS, $n forward passes each (run.c stops at BOS), $rounds rounds interleaved"
echo

declare -A rc ps
for r in $(seq "$rounds"); do
	for t in "${threads[@]}"; do
		a=$(runc_run "$t")
		b=$(ps_run "$t" "$n" | json_field decode_tokens_per_s)
		rc[$t]+="$a "
		ps[$t]+="$b "
		printf 'round %d threads %d: run.c %.1f tok/s, pipeshard %.1f tok/s\n' "$r" "$t" "$a" "$b" >&2
	done
done

echo "| threads | run.c tok/s (median) | pipeshard f32 tok/s (median) | pipeshard/run.c | per-round ratios (median) | run.c rounds | pipeshard rounds |"
echo "|---|---|---|---|---|---|---|"
for t in "${threads[@]}"; do
	a=$(echo "${rc[$t]}" | tr ' ' '\n' | grep . | median)
	b=$(echo "${ps[$t]}" | tr ' ' '\n' | grep . | median)
	ratios=$(paste <(echo "${ps[$t]}" | tr ' ' '\n' | grep .) <(echo "${rc[$t]}" | tr ' ' '\n' | grep .) | awk '{printf "%.3f\n", $1/$2}')
	rm=$(echo "$ratios" | median)
	printf '| %d | %.1f | %.1f | %.3f | %.3f | %s | %s |\n' "$t" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{print b/a}')" "$rm" \
		"$(printf '%.0f ' ${rc[$t]} | sed 's/ $//')" "$(printf '%.0f ' ${ps[$t]} | sed 's/ $//')"
done
