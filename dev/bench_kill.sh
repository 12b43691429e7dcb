#!/usr/bin/env bash
# The kill loops of issue 29 as a benchmark (not CI: minutes of runs, timing-dependent paths):
# SIGKILLs of train_gpt2 and train_lora at random moments and at chosen system calls of the save
# path, of one rank of `mpirun -np 2`, and two programs on one --out. Every trial ends by running
# the same command until the run completes; it is a bad outcome when the completed run differs
# from an uninterrupted one (losses, and for one process the final model or adapter byte for
# byte; under mpirun, where a resume may change the rank count, losses to 1e-5), when a file the
# user keeps in --out (the --model / --adapter the run trains from, a note) changed or went, when
# temporaries or PENDING markers are left, when log.jsonl has a line that is no JSON or a step
# twice, when a resume fails, or when a second program on a running --out is not refused with the
# holder's pid. (Kills of data/prepare have their own script.)
# Preference runs (the "pref" scenarios): DPO, IPO, ORPO and SimPO in both trainers on pairs of
# test/ref/pref_tiny's vocabulary (data/prepare's output, its ids folded below 100), train_gpt2's
# reference stored (ref_logps_*.bin), train_lora's the base with the adapters off, and train_lora
# DPO with --ref-model (stored); evaluated every 8 steps. SIGKILLs at random moments (a third of
# them within a stored reference's pass, or the start-up) and at chosen system calls of the save path
# (a checkpoint's or a reference file's), each trial then run with --resume auto until the run
# completes; bad as above, and also when a reference file differs from the uninterrupted run's or
# the log's rewards or validation losses do. The kills are counted by where they landed.
#   bash dev/bench_kill.sh [kills] [all|sft|pref]  (default 200 over all the scenarios; sft: those
#                                                   of issue 29 alone, pref: the preference ones)
#   bash dev/bench_kill.sh convert [kills]         (convert's part, bench_convert below: default 100)
#   BIN_DIR=build/cpu/bin (default: the top-level programs, built with make -s), SEED=1
# Prints one line per scenario (trials, kills, bad outcomes) and exits 1 on any bad outcome.
# Measured here (2 shared cores, CPU build, Open MPI 4.1.4), two runs of `bash dev/bench_kill.sh 210`:
#   211 kills (random G 31, random L 31, targeted G 33, targeted L 45, one rank of mpirun 46,
#   two programs 25), 0 bad outcomes, 425 s; 212 kills (18, 42, 42, 57, 27, 26), 0 bad, 430 s,
#   with 57 second programs started on a running --out, all 57 refused with the holder's pid.
#   `bash dev/bench_kill.sh 110 pref` (the machine loaded by other jobs: runs of 0.8-2.7 s):
#   112 kills (random pref G 34, random pref L 32, targeted pref G 23, targeted pref L 23; where
#   they landed: start-up 19, the reference pass 10, steps 37, a save's rename 16, fsync 16,
#   unlink 14), 0 bad outcomes, 429 s.
#   `bash dev/bench_kill.sh convert 110` (d6, the machine loaded likewise): 123 kills (safetensors 28,
#   transformers directory 20, bf16 .bin 23, GGUF q8_0 34, merged adapter 18), 0 bad outcomes, 685 s.
set -u
cd "$(dirname "$0")/.."
KILLS=${1:-200}; MODE=${2:-all}; SEED=${SEED:-1}
[ "${1:-}" = convert ] && { MODE=convert; KILLS=${2:-100}; }
case $MODE in all|sft|pref|convert) ;; *) echo "usage: dev/bench_kill.sh [kills] [all|sft|pref] | dev/bench_kill.sh convert [kills]"; exit 1 ;; esac
SFT=1; PREF=1; [ "$MODE" = pref ] && SFT=0; [ "$MODE" = sft ] && PREF=0
if [ -z "${BIN_DIR:-}" ]; then make -s train_gpt2 train_lora convert >/dev/null || exit 1; BIN_DIR=.; fi
BIN_DIR=$(cd "$BIN_DIR" && pwd)
G="$BIN_DIR/train_gpt2"; L="$BIN_DIR/train_lora"; MODEL="$PWD/test/ref/gpt2_tiny"
source test/lib.sh # (make_shard, $TMP removed at exit)
RANDOM=$SEED
export OMP_NUM_THREADS=1

# ---- convert: SIGKILLs of `convert` writing each kind of output (a lone .safetensors, a
# transformers directory, an llm.c bf16 .bin, GGUF q8_0, a LoRA adapter merged into a .bin), at
# random moments and at a chosen system call (strace injects the signal at the K-th write, pwrite64
# (the lock file's text), rename, fsync, fcntl or unlink), each trial ending with the same command run again until it completes.
# Bad outcomes: a file under a final name that is not the uninterrupted run's (a partial or mixed
# output), a temporary (NAME.tmp.<pid>) or a .lock left once the command completed, a completed
# output that differs from the uninterrupted one, a refusal, a command that does not complete.
bench_convert() {
  local kills=$1 C="$BIN_DIR/convert" W="$TMP/cv" sc
  mkdir -p "$W/in"
  "$C" --model d6 --seed 3 --out "$W/in/d6.bin" > "$W/in.log" 2>&1 && "$C" --model "$W/in/d6.bin" --out "$W/in/hf" >> "$W/in.log" 2>&1 \
    || { cat "$W/in.log"; echo "convert of the inputs failed"; return 1; }
  make_shard "$W/t.bin" 4000 50257 1
  "$L" --model "$W/in/hf" --train-data "$W/t.bin" -b 1 -t 32 --steps 2 --lr 1e-2 --lora-rank 4 --lora-targets q,v,mlp.c_fc \
    --save-format none --out "$W/ad" > "$W/ad.log" 2>&1 || { tail -3 "$W/ad.log"; echo "the adapter run failed"; return 1; }
  local -A ARGS=( [st]="--model $W/in/d6.bin --out @/m.safetensors" [hf]="--model $W/in/d6.bin --out @/hf"
                  [bf16]="--model $W/in/hf --out @/m.bin --to llmc-bf16" [gguf]="--model $W/in/d6.bin --out @/m.gguf --gguf-type q8_0"
                  [merge]="--model $W/in/hf --adapter $W/ad --out @/merged.bin" )
  local SCS=(st hf bf16 gguf merge) SYSCALLS=(write pwrite64 rename fsync fcntl unlink)
  local -A REF SECS NC TR KL BD AT
  cv_args() { local a=${ARGS[$1]}; echo "${a//@/$2}"; } # (no spaces in $W)
  cv_files() { (cd "$1" && find . -type f | sort | xargs -r sha256sum); }
  cv_bad() { BD[$1]=$((${BD[$1]:-0} + 1)); echo "BAD [$1] $2" >&2; }
  for sc in "${SCS[@]}"; do
    rm -rf "$W/ref_$sc"; mkdir -p "$W/ref_$sc"
    local t0; t0=$(date +%s.%N)
    "$C" $(cv_args $sc "$W/ref_$sc") > "$W/ref_$sc.log" 2>&1 || { cat "$W/ref_$sc.log"; echo "reference $sc failed"; return 1; }
    SECS[$sc]=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.2f", e-s}')
    REF[$sc]=$(cv_files "$W/ref_$sc")
    rm -rf "$W/cnt"; mkdir -p "$W/cnt"
    strace -f -qq -o "$W/cnt.strace" -e trace=write,pwrite64,rename,fsync,fcntl,unlink "$C" $(cv_args $sc "$W/cnt") > /dev/null 2>&1
    for s in "${SYSCALLS[@]}"; do NC[$sc.$s]=$(grep -c " $s(" "$W/cnt.strace"); done
  done
  # after a kill: every file under a final name is the uninterrupted run's (temporaries and the
  # lock file may stay until the next run)
  cv_after_kill() {
    local f line
    while read -r line; do
      f=${line##* }; case $f in *.tmp.[0-9]*|*/.lock) continue ;; esac
      grep -qxF -- "$line" <<<"${REF[$1]}" || cv_bad "$1" "after a kill: $f is not the uninterrupted run's (partial or mixed)"
    done < <(cv_files "$2")
  }
  cv_finish() { # the command again: it must complete, unrefused, with exactly the uninterrupted run's files
    local sc=$1 d=$2 got left
    if ! "$C" $(cv_args $sc "$d") > "$d.fin.log" 2>&1; then cv_bad $sc "the run after the kill failed: $(grep -m1 '^error' "$d.fin.log")"; return; fi
    got=$(cv_files "$d")
    [ "$got" = "${REF[$sc]}" ] && return
    left=$(cd "$d" && find . -name '*.tmp.*' -o -name .lock | tr '\n' ' ')
    if [ -n "$left" ]; then cv_bad $sc "left after the next run completed: $left"; else cv_bad $sc "the completed output differs: $(diff <(echo "$got") <(echo "${REF[$sc]}") | head -3)"; fi
  }
  cv_trial() { # cv_trial SCENARIO random|targeted
    local sc=$1 d="$W/run" n k pid rc delay s nc
    rm -rf "$d" "$d".*; mkdir -p "$d"
    TR[$sc]=$((${TR[$sc]:-0} + 1))
    if [ "$2" = random ]; then
      n=$((1 + RANDOM % 3))
      for ((k = 0; k < n; k++)); do
        delay=$(awk -v r=$RANDOM -v s="${SECS[$sc]}" 'BEGIN{printf "%.3f", r / 32768 * s * 1.2}')
        "$C" $(cv_args $sc "$d") > "$d.$k.log" 2>&1 & pid=$!
        sleep "$delay"; kill -9 $pid 2>/dev/null; { wait $pid; } 2>/dev/null; rc=$?
        [ $rc -eq 137 ] && KL[$sc]=$((${KL[$sc]:-0} + 1))
        cv_after_kill $sc "$d"
        [ $rc -eq 0 ] && break
      done
    else
      s=${SYSCALLS[$((RANDOM % ${#SYSCALLS[@]}))]}; nc=${NC[$sc.$s]:-0}
      [ "$nc" -gt 0 ] || { s=write; nc=${NC[$sc.write]}; }
      k=$((1 + (RANDOM * 32768 + RANDOM) % nc))
      { strace -f -qq -o /dev/null -e trace=$s -e inject=$s:signal=SIGKILL:when=$k "$C" $(cv_args $sc "$d") > "$d.k.log" 2>&1; } 2>/dev/null; rc=$?
      [ $rc -ne 0 ] && KL[$sc]=$((${KL[$sc]:-0} + 1)) && AT[$s]=$((${AT[$s]:-0} + 1))
      cv_after_kill $sc "$d"
    fi
    cv_finish $sc "$d"
  }
  cv_total() { local t=0 v; for v in "${KL[@]}"; do t=$((t + v)); done; echo $t; }
  local start; start=$(date +%s)
  while [ "$(cv_total)" -lt "$kills" ]; do
    for sc in "${SCS[@]}"; do cv_trial $sc random; cv_trial $sc targeted; done
  done
  printf '\n%-64s %7s %7s %5s %6s\n' "convert scenario (OUT: a fresh folder a trial)" trials kills bad "ref s"
  local nbad=0
  for sc in "${SCS[@]}"; do
    printf '%-64s %7s %7s %5s %6s\n' "$sc: $(cv_args $sc OUT | sed "s|$W/||g")" "${TR[$sc]:-0}" "${KL[$sc]:-0}" "${BD[$sc]:-0}" "${SECS[$sc]}"
    nbad=$((nbad + ${BD[$sc]:-0}))
  done
  echo "targeted kills at: $(for s in "${SYSCALLS[@]}"; do printf '%s %s, ' $s "${AT[$s]:-0}"; done)the rest at random moments"
  echo "convert: $(cv_total) kills, $nbad bad outcomes, $(( $(date +%s) - start )) s (d6 = GPT-2 6 layers, C 384, 30M parameters, 121 MB fp32)"
  [ "$nbad" = 0 ]
}
if [ "$MODE" = convert ]; then bench_convert "$KILLS"; exit $?; fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
HAVE_MPI=0; command -v mpirun >/dev/null 2>&1 && HAVE_MPI=1

make_shard "$TMP/t.bin" 40000 100 1
"$BIN_DIR/convert" --model "$MODEL" --out "$TMP/own.bin" >/dev/null 2>&1 || { echo "convert failed"; exit 1; }
"$L" --model "$MODEL" --train-data "$TMP/t.bin" -b 2 -t 32 --steps 2 --lora-rank 4 --lora-targets q,v --out "$TMP/ad" >/dev/null 2>&1 || { echo "adapter failed"; exit 1; }
# the preference runs' pairs: data/prepare --pack 64 of 600 generated pairs (60 held out), the
# token ids folded below test/ref/pref_tiny's vocabulary of 100 (<|endoftext|> to its 99), the
# set fields cleared (the folded tokens are no data/prepare output's: no checksums to match)
PMODEL="$PWD/test/ref/pref_tiny"
if [ $PREF = 1 ]; then
  python3 - "$TMP/pairs.jsonl" <<'PY'
import json, random, sys
random.seed(3)
w = "the a king queen lord lady sword crown night day love hate fair foul sweet bitter".split()
say = lambda: " " + " ".join(random.choice(w) for _ in range(random.randint(2, 6)))
with open(sys.argv[1], "w") as f:
    for i in range(600): f.write(json.dumps({"prompt": "Q%d:%s" % (i, say()), "chosen": say(), "rejected": say()}) + "\n")
PY
  "$BIN_DIR/prepare" --input "$TMP/pairs.jsonl" --out-dir "$TMP/pd" --name pairs --pack 64 --quiet || { echo "prepare failed"; exit 1; }
  python3 - "$TMP/pd" <<'PY'
import glob, struct, sys
for b in glob.glob(sys.argv[1] + "/*.bin"):
    raw = open(b, "rb").read()
    h = list(struct.unpack("<256i", raw[:1024])); n = h[2]
    tok = [99 if t == 50256 else t % 99 for t in struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])]
    h[6:10] = [0] * 4
    open(b, "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % n, *tok))
    m = b[:-4] + ".mask"; raw = open(m, "rb").read()
    mh = list(struct.unpack("<256i", raw[:1024])); mh[6:11] = [0] * 5
    open(m, "wb").write(struct.pack("<256i", *mh) + raw[1024:])
PY
fi

# ---- the runs: train_gpt2 from a model_00005000.bin the user keeps in --out (G: 24 steps; G120:
# 120, long enough for a second program to meet it; M: one micro-batch of 32 tokens per rank and
# 64 per step, for 2 ranks or 1 with accumulation), train_lora from an adapter_00000450/ kept there
# (L, with dropout); a checkpoint every 3 steps, the newest 2 kept
COMMON=(--train-data "$TMP/t.bin" -t 32 --threads 1 --save-every 3 --keep-checkpoints 2 --lr 1e-3 --dtype fp32 --seed 5 --resume auto)
cmd_of() { # cmd_of RUN OUT: the command (its words one a line)
  case $1 in
    G) printf '%s\n' "$G" --model "$2/model_00005000.bin" "${COMMON[@]}" -b 2 --steps 24 --out "$2" ;;
    G120) printf '%s\n' "$G" --model "$2/model_00005000.bin" "${COMMON[@]}" -b 2 --steps 120 --out "$2" ;;
    M) printf '%s\n' "$G" --model "$2/model_00005000.bin" "${COMMON[@]}" -b 1 --total-batch-tokens 64 --steps 24 --out "$2" ;;
    L) printf '%s\n' "$L" --model "$MODEL" --adapter "$2/adapter_00000450" "${COMMON[@]}" -b 2 --steps 24 --lora-dropout 0.1 --out "$2" ;;
    PG.*) printf '%s\n' "$G" --model "$PMODEL" "${PCOMMON[@]}" --objective "${1#PG.}" --out "$2" ;;
    PL.ref) printf '%s\n' "$L" --model "$PMODEL" "${PCOMMON[@]}" --objective dpo --ref-model "$PMODEL/ref" --lora-dropout 0.1 --out "$2" ;;
    PL.*) printf '%s\n' "$L" --model "$PMODEL" "${PCOMMON[@]}" --objective "${1#PL.}" --lora-dropout 0.1 --out "$2" ;;
  esac
}
# the preference runs: 24 steps of 2 windows of 64 tokens, a checkpoint every 3 steps, evaluations
# every 8 (4 batches); PG.<objective> train_gpt2, PL.<objective> train_lora, PL.ref its --ref-model run
PCOMMON=(--train-data "$TMP/pd/pairs_train_*.bin" --val-data "$TMP/pd/pairs_val_*.bin" -t 64 -b 2 --steps 24 --threads 1 --save-every 3
         --keep-checkpoints 2 --eval-every 8 --eval-batches 4 --lr 1e-3 --dtype fp32 --seed 5 --resume auto)
PRUNS=(PG.dpo PG.ipo PG.orpo PG.simpo PL.dpo PL.ipo PL.orpo PL.simpo PL.ref)
is_pref() { [[ $1 == P* ]]; }
setup_out() { # setup_out OUT [RUN]: a fresh --out holding the user's files (a preference run's: none)
  rm -rf "$1"; mkdir -p "$1/adapter_00000450"
  if is_pref "${2:-}"; then rm -rf "$1"; mkdir -p "$1"; return; fi
  cp "$TMP/own.bin" "$1/model_00005000.bin"
  cp "$TMP/ad/adapter_config.json" "$TMP/ad/adapter_model.safetensors" "$1/adapter_00000450/"
  echo "my notes" > "$1/notes.txt"
}
user_sum() { (cd "$1" && sha256sum model_00005000.bin adapter_00000450/* notes.txt); }
final_of() { [[ $1 == L || $1 == PL.* ]] && echo adapter_model.safetensors || echo model.bin; }
losses() { python3 -c '
import json, sys
seen = set()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train_loss" not in r: continue
    if r["step"] in seen: sys.exit("step %d logged twice" % r["step"])
    seen.add(r["step"]); print(r["step"], r["train_loss"], r.get("rewards/margins", ""))' "$1/log.jsonl"; }
# a preference run's evaluations and its reference files (their bytes), to compare as they are
pref_rest() {
  grep -o '"step": *[0-9]*, *"val_loss":[^,]*' "$1/log.jsonl"
  (cd "$1" && sha256sum ref_logps_*.bin 2>/dev/null)
}

setup_out "$TMP/ref_base"; USER_SUM=$(user_sum "$TMP/ref_base")
declare -A REF_LOSS REF_FINAL REF_SECS REF_REST REF_START REF_PASS
RUNS=(); [ $SFT = 1 ] && RUNS+=(G G120 L) && [ $HAVE_MPI = 1 ] && RUNS+=(M)
[ $PREF = 1 ] && RUNS+=("${PRUNS[@]}")
for p in "${RUNS[@]}"; do
  setup_out "$TMP/ref_$p" $p; mapfile -t c < <(cmd_of $p "$TMP/ref_$p")
  launch=(); [ $p = M ] && launch=(mpirun -np 2)
  t0=$(date +%s.%N)
  "${launch[@]}" "${c[@]}" > "$TMP/ref_$p.log" 2>&1 & pid=$!
  # (REF_START: when the first step began, the end of the start-up and the reference pass)
  while kill -0 $pid 2>/dev/null && [ -z "${REF_START[$p]:-}" ]; do
    grep -qs '^step ' "$TMP/ref_$p.log" && REF_START[$p]=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.2f", e-s}')
    sleep 0.01
  done
  wait $pid || { tail -3 "$TMP/ref_$p.log"; echo "reference run $p failed"; exit 1; }
  REF_SECS[$p]=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.2f", e-s}')
  REF_LOSS[$p]=$(losses "$TMP/ref_$p"); REF_FINAL[$p]=$(sha256sum < "$TMP/ref_$p/$(final_of $p)")
  is_pref $p && REF_REST[$p]=$(pref_rest "$TMP/ref_$p")
  REF_PASS[$p]=$(sed -n 's/^reference: log-probabilities computed in \([0-9.]*\) s$/\1/p' "$TMP/ref_$p.log") # (a stored reference's pass)
done

declare -A TRIALS KILLED BAD
REFUSED=0 # second programs refused while the first ran
note_bad() { BAD[$1]=$((${BAD[$1]:-0} + 1)); echo "BAD [$1] $2" >&2; }

# verify SCENARIO PROG OUT TOL: the completed run against the reference
verify() {
  local sc=$1 p=$2 d=$3 tol=$4 got
  got=$(losses "$d" 2>&1) || { note_bad "$sc" "$d: log.jsonl: $got"; return; }
  if [ "$tol" = 0 ]; then
    [ "$got" = "${REF_LOSS[$p]}" ] || { note_bad "$sc" "$d: losses differ from the uninterrupted run"; return; }
    [ "$(sha256sum < "$d/$(final_of $p)")" = "${REF_FINAL[$p]}" ] || { note_bad "$sc" "$d: final $(final_of $p) differs"; return; }
  elif ! paste <(echo "$got") <(echo "${REF_LOSS[$p]}") | awk -v t="$tol" 'NF != 4 || $1 != $3 {bad = 1} {d = $2 - $4; if (d < 0) d = -d; if (d > t) bad = 1} END {exit bad}'; then
    note_bad "$sc" "$d: losses differ from the uninterrupted run by more than $tol"; return
  fi
  if is_pref $p; then
    [ "$(pref_rest "$d")" = "${REF_REST[$p]}" ] || { note_bad "$sc" "$d: evaluations or reference files differ from the uninterrupted run's"; return; }
  else
    [ "$(user_sum "$d")" = "$USER_SUM" ] || { note_bad "$sc" "$d: a file the user keeps in --out changed or went"; return; }
  fi
  local left; left=$(cd "$d" && ls -A | grep -E '\.tmp\.[0-9]+$|^PENDING_' | tr '\n' ' ')
  [ -z "$left" ] || note_bad "$sc" "$d: leftovers: $left"
}

# finish SCENARIO PROG OUT [launcher...]: run the command until the run completes (at most 6 tries)
finish_run() {
  local sc=$1 p=$2 d=$3; shift 3
  local c; mapfile -t c < <(cmd_of "$p" "$d")
  for _ in 1 2 3 4 5 6; do
    "$@" "${c[@]}" > "$d.fin.log" 2>&1 && return 0
    grep -q "is in use by" "$d.fin.log" || break
    sleep 0.5 # (the last rank of a killed job still going)
  done
  note_bad "$sc" "$d: the run does not complete: $(grep -m1 '^error' "$d.fin.log")"; return 1
}

# ---- random SIGKILLs of one process: 1 to 3 kills at random moments, then to the end
random_trial() { # random_trial PROG
  local p=$1 sc="random $1" d="$TMP/rnd" c pid rc delay n k
  setup_out "$d"; mapfile -t c < <(cmd_of "$p" "$d")
  TRIALS[$sc]=$((${TRIALS[$sc]:-0} + 1))
  n=$((1 + RANDOM % 3))
  for ((k = 0; k < n; k++)); do
    delay=$(awk -v r=$RANDOM -v s="${REF_SECS[$p]}" 'BEGIN{printf "%.3f", r / 32768 * (s * 1.3 + 0.1)}')
    "${c[@]}" > "$d.$k.log" 2>&1 & pid=$!
    sleep "$delay"; kill -9 $pid 2>/dev/null; { wait $pid; } 2>/dev/null; rc=$?
    [ $rc -eq 137 ] && KILLED[$sc]=$((${KILLED[$sc]:-0} + 1))
    [ $rc -eq 0 ] && break
  done
  finish_run "$sc" "$p" "$d" && verify "$sc" "$p" "$d" 0
}

# ---- preference runs: 1 to 3 SIGKILLs of a random one of the trainer's runs, a third of them within
# its reference pass (a stored reference's, by its timing in the uninterrupted run: the end of the
# start-up, before the first step; else the start-up), the rest at random over the run; each
# counted by where it landed: the start-up, the reference pass (by its time), or the steps
declare -A PHASE
pref_phase() { # pref_phase RUN OUT DELAY: where a kill at DELAY s landed
  local p=$1 d=$2 t=$3
  if grep -q '"train_loss"' "$d/log.jsonl" 2>/dev/null; then echo "steps (their checkpoints and evaluations)"; return; fi
  if [ -n "${REF_PASS[$p]}" ] && awk -v t="$t" -v a="${REF_START[$p]}" -v b="${REF_PASS[$p]}" 'BEGIN{exit !(t >= a - b - 0.05)}'; then
    echo "the reference pass (by its time)"
  else echo "start-up (before the first step)"; fi
}
pref_random_trial() { # pref_random_trial G|L
  local tr=$1 sc="random pref $1" d="$TMP/prnd" c pid rc delay n k p runs=()
  for p in "${PRUNS[@]}"; do [[ $p == P$tr.* ]] && runs+=("$p"); done
  p=${runs[$((RANDOM % ${#runs[@]}))]}
  setup_out "$d" $p; mapfile -t c < <(cmd_of "$p" "$d")
  TRIALS[$sc]=$((${TRIALS[$sc]:-0} + 1))
  n=$((1 + RANDOM % 3))
  for ((k = 0; k < n; k++)); do
    case $((RANDOM % 3)) in # (a stored reference's: its pass, in the uninterrupted run's timing; else the start-up)
      0) delay=$(awk -v r=$RANDOM -v a="${REF_START[$p]}" -v b="${REF_PASS[$p]:-${REF_START[$p]}}" 'BEGIN{d = a - (r / 32768) * (b + 0.05); printf "%.3f", d < 0 ? 0 : d}') ;;
      *) delay=$(awk -v r=$RANDOM -v s="${REF_SECS[$p]}" 'BEGIN{printf "%.3f", r / 32768 * (s * 1.3 + 0.1)}') ;;
    esac
    "${c[@]}" > "$d.$k.log" 2>&1 & pid=$!
    sleep "$delay"; kill -9 $pid 2>/dev/null; { wait $pid; } 2>/dev/null; rc=$?
    if [ $rc -eq 137 ]; then
      KILLED[$sc]=$((${KILLED[$sc]:-0} + 1))
      local ph; ph=$(pref_phase "$p" "$d" "$delay"); PHASE[$ph]=$((${PHASE[$ph]:-0} + 1))
    fi
    [ $rc -eq 0 ] && break
  done
  finish_run "$sc" "$p" "$d" && verify "$sc" "$p" "$d" 0
}

# ---- targeted SIGKILLs: at the K-th rename / unlink / fsync / write of a run (strace injects the
# signal at that system call), then to the end
declare -A NCALLS
count_calls() { # count_calls PROG: how many of each call an uninterrupted run makes
  local d="$TMP/cnt" c
  setup_out "$d" $1; mapfile -t c < <(cmd_of "$1" "$d")
  strace -f -qq -o "$TMP/cnt.strace" -e trace=rename,unlink,fsync,rmdir "${c[@]}" > /dev/null 2>&1
  for s in rename unlink fsync rmdir; do NCALLS[$1.$s]=$(grep -c " $s(" "$TMP/cnt.strace"); done
}
targeted_trial() { # targeted_trial PROG CALL K [SCENARIO]
  local p=$1 s=$2 k=$3 sc=${4:-"targeted $1"} d="$TMP/tgt" c rc
  setup_out "$d" $p; mapfile -t c < <(cmd_of "$p" "$d")
  TRIALS[$sc]=$((${TRIALS[$sc]:-0} + 1))
  { strace -f -qq -o /dev/null -e trace="$s" -e inject="$s":signal=SIGKILL:when="$k" "${c[@]}" > "$d.k.log" 2>&1; } 2>/dev/null; rc=$?
  if [ $rc -ne 0 ]; then
    KILLED[$sc]=$((${KILLED[$sc]:-0} + 1))
    is_pref $p && PHASE["a save's $s (a checkpoint's, a reference file's, the record's)"]=$((${PHASE["a save's $s (a checkpoint's, a reference file's, the record's)"]:-0} + 1))
  fi
  finish_run "$sc" "$p" "$d" && verify "$sc" "$p" "$d" 0
}

# ---- one rank of mpirun -np 2 SIGKILLed (ZeRO 0..2); resumed on 1 or 2 ranks, maybe killed again
rank_of() { # rank_of MPIRUN_PID RANK: that rank's pid (a child of mpirun with its rank in the environment)
  local q
  for q in $(pgrep -P "$1"); do tr '\0' '\n' < "/proc/$q/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$q"; return 0; }; done
  return 1
}
mpi_trial() {
  local sc="mpirun -np 2, one rank" d="$TMP/mpi" c job victim delay rc k n z
  setup_out "$d"; mapfile -t c < <(cmd_of M "$d")
  TRIALS[$sc]=$((${TRIALS[$sc]:-0} + 1))
  n=$((1 + RANDOM % 2))
  for ((k = 0; k < n; k++)); do
    z=$((RANDOM % 3))
    mpirun -np 2 "${c[@]}" --zero $z > "$d.$k.log" 2>&1 & job=$!
    victim=""
    for _ in $(seq 100); do victim=$(rank_of $job $((RANDOM % 2))) && break; sleep 0.05; done
    delay=$(awk -v r=$RANDOM -v s="${REF_SECS[M]}" 'BEGIN{printf "%.3f", r / 32768 * (s * 1.3)}')
    sleep "$delay"
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null && KILLED[$sc]=$((${KILLED[$sc]:-0} + 1))
    { wait $job; } 2>/dev/null; rc=$?
    [ $rc -eq 0 ] && break
  done
  # to the end on 2 ranks or on 1 (the 64 tokens of a step then in 2 micro-steps)
  if [ $((RANDOM % 2)) = 0 ]; then finish_run "$sc" M "$d" mpirun -np 2
  else finish_run "$sc" M "$d"; fi && verify "$sc" M "$d" 1e-5
}

# ---- two programs on one --out: while A trains, B (the other trainer, a new run of the same one,
# or A's own command resuming) must be refused with A's pid; A is SIGKILLed in half the trials,
# after which B's resume takes the lock over and completes the run
two_trial() {
  local sc="two programs" d="$TMP/two" c a out rc
  setup_out "$d"; mapfile -t c < <(cmd_of G120 "$d")
  TRIALS[$sc]=$((${TRIALS[$sc]:-0} + 1))
  "${c[@]}" > "$d.a.log" 2>&1 & a=$!
  for _ in $(seq 300); do grep -q '"train_loss"' "$d/log.jsonl" 2>/dev/null && break; sleep 0.02; done
  case $((RANDOM % 3)) in
    0) out=$("$L" --model "$MODEL" --train-data "$TMP/t.bin" -t 32 --steps 5 --out "$d" 2>&1) ;;
    1) out=$("$G" --model "$MODEL" --train-data "$TMP/t.bin" -t 32 --steps 5 --out "$d" 2>&1) ;;
    2) out=$("${c[@]}" 2>&1) ;;
  esac
  rc=$?
  if kill -0 $a 2>/dev/null; then
    if [ $rc -ne 0 ] && grep -q "is in use by process $a " <<<"$out"; then REFUSED=$((REFUSED + 1))
    else note_bad "$sc" "B was not refused while A ($a) ran: exit $rc: $out"; fi
  fi
  if [ $((RANDOM % 2)) = 0 ]; then
    sleep "0.$((RANDOM % 8))"; kill -9 $a 2>/dev/null && KILLED[$sc]=$((${KILLED[$sc]:-0} + 1))
  fi
  { wait $a; } 2>/dev/null
  finish_run "$sc" G120 "$d" && verify "$sc" G120 "$d" 0
}

total_kills() { local t=0 v; for v in "${KILLED[@]}"; do t=$((t + v)); done; echo $t; }
start=$(date +%s)
# a share of the kills per scenario, in rounds, until the total is reached
if [ $SFT = 1 ]; then count_calls G; count_calls L; fi
if [ $PREF = 1 ]; then for p in "${PRUNS[@]}"; do count_calls $p; done; fi
round=0
while [ "$(total_kills)" -lt "$KILLS" ]; do
  round=$((round + 1))
  if [ $SFT = 1 ]; then
    random_trial G; random_trial L
    for p in G L; do
      calls=(rename unlink fsync rmdir); s=${calls[$((RANDOM % 4))]}; n=${NCALLS[$p.$s]:-0}
      [ "$n" -gt 0 ] && targeted_trial $p $s $((1 + RANDOM % n))
    done
    [ $HAVE_MPI = 1 ] && mpi_trial
    two_trial
  fi
  if [ $PREF = 1 ]; then
    pref_random_trial G; pref_random_trial L; pref_random_trial G; pref_random_trial L
    for t in G L; do
      p=${PRUNS[$((RANDOM % ${#PRUNS[@]}))]}; [[ $p == P$t.* ]] || p=P$t.dpo
      calls=(rename unlink fsync); s=${calls[$((RANDOM % 3))]}; n=${NCALLS[$p.$s]:-0}
      [ "$n" -gt 0 ] && targeted_trial $p $s $((1 + RANDOM % n)) "targeted pref $t"
    done
  fi
done

printf '\n%-26s %7s %7s %5s\n' scenario trials kills bad
for sc in "random G" "random L" "targeted G" "targeted L" "mpirun -np 2, one rank" "two programs" \
          "random pref G" "random pref L" "targeted pref G" "targeted pref L"; do
  [ -n "${TRIALS[$sc]:-}" ] && printf '%-26s %7s %7s %5s\n' "$sc" "${TRIALS[$sc]:-0}" "${KILLED[$sc]:-0}" "${BAD[$sc]:-0}"
done
if [ $SFT = 1 ]; then
  echo "two programs: $REFUSED second programs started on a running --out, all refused with the holder's pid (the rest found the first one done)"
fi
if [ $PREF = 1 ]; then
  echo "preference kills by where they landed:$(for ph in "${!PHASE[@]}"; do printf ' %s %s;' "$ph" "${PHASE[$ph]}"; done)"
  echo "preference runs (uninterrupted, s to the first step / in all):$(for p in "${PRUNS[@]}"; do printf ' %s %s/%s' $p "${REF_START[$p]}" "${REF_SECS[$p]}"; done)" \
       "(PG = train_gpt2, its reference stored; PL = train_lora, the adapters off; PL.ref = train_lora --ref-model, stored)"
fi
nbad=0; for v in "${BAD[@]}"; do nbad=$((nbad + v)); done
echo "total: $(total_kills) kills, $nbad bad outcomes, $(( $(date +%s) - start )) s"
if [ $SFT = 1 ]; then
  echo "reference runs: train_gpt2 ${REF_SECS[G]} s, train_lora ${REF_SECS[L]} s" \
       "(G = train_gpt2 from a model_00005000.bin in --out, L = train_lora from an adapter_00000450/ in --out; calls per run: G" \
       "$(for s in rename unlink fsync rmdir; do printf '%s %s ' $s "${NCALLS[G.$s]}"; done)| L $(for s in rename unlink fsync rmdir; do printf '%s %s ' $s "${NCALLS[L.$s]}"; done))"
  [ $HAVE_MPI = 1 ] || echo "note: MPI not installed: the mpirun scenario did not run"
fi
[ "$nbad" = 0 ]
