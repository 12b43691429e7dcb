#!/usr/bin/env bash
# Multi-host runs over a real network stack: two "hosts" made of network namespaces on this machine
# (ip netns, joined by a veth pair), OpenMPI over TCP only (pml ob1, btl tcp,self: no shared
# memory at all, let alone between hosts), launched through test/netns_rsh.sh as OpenMPI's rsh
# agent instead of ssh. 4 ranks, 2 per host:
#   - the collectives of test_comm, bit-exact, with the default and with tiny staging buffers;
#     ranks are grouped by host (local_world 2);
#   - train_gpt2 and train_lora at ZeRO 1 and 2, and at ZeRO 3 (also hybrid: one shard group per
#     host; LoRA training biases and ln_f; QLoRA): losses equal to one process with the same global
#     batch (to 1e-5, as on one host);
#   - a rank on the second host killed (SIGKILL): every process on both hosts gone within 30 s;
#   - a rank on the second host stopped (SIGSTOP): the watchdog (--watchdog-timeout 5) ends every
#     process on both hosts within 60 s, non-zero, naming the stopped rank;
#   - a slow network (tc tbf, 2 Mbit/s): an all-reduce longer than the watchdog's timeout that
#     keeps moving data finishes (it is not taken for a hang).
# docs/MULTINODE.md shows the same commands for real hosts. Needs root and network namespaces;
# skipped with a message where they are not permitted.
source "$(dirname "$0")/lib.sh"
san_skip "the ranks run the code test_train_mpi.sh, test_zero3.sh and test_comm run under ASan+UBSan; here only the transport differs"
BUILD="${BUILD:-build}"
skip() { echo "skip: $*"; exit 0; }
command -v mpirun >/dev/null 2>&1 || skip "MPI not installed (apt-get install libopenmpi-dev openmpi-bin)"
command -v ip >/dev/null 2>&1 || skip "the ip tool (iproute2) is not installed: no network namespaces"
command -v unshare >/dev/null 2>&1 || skip "unshare (util-linux) is not installed"
[ "$("$BUILD/test/test_comm" --has-mpi 2>/dev/null)" = mpi ] || skip "this build has no MPI"
source "$(dirname "$0")/lib_mpi.sh"

# ---- two hosts: namespaces A and B, 10.231.0.1 and .2 on a veth pair
NSA=llmc_a_$$ NSB=llmc_b_$$
NET=10.231.0
cleanup() {
  local ns
  for ns in "$NSA" "$NSB"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "$NSA" 2>/dev/null || skip "creating a network namespace is not permitted here (ip netns add needs root / CAP_SYS_ADMIN)"
ip netns add "$NSB" || skip "cannot create a second network namespace"
if ! { ip link add veth_a netns "$NSA" type veth peer name veth_b netns "$NSB" &&
       ip -n "$NSA" addr add "$NET.1/24" dev veth_a && ip -n "$NSB" addr add "$NET.2/24" dev veth_b &&
       ip -n "$NSA" link set veth_a up && ip -n "$NSB" link set veth_b up &&
       ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up; }; then
  skip "cannot connect the namespaces with a veth pair"
fi
AGENT="$(cd "$(dirname "$0")" && pwd)/netns_rsh.sh"
export LLMC_NETNS_HOSTS="hosta=$NSA hostb=$NSB"
# mpirun runs on hosta (through the agent, as `ssh hosta mpirun ...` would) and starts the ranks of
# hostb through the agent; TCP only, on the namespaces' network
MPIRUN=("$AGENT" hosta mpirun --host hosta:2,hostb:2 -np 4 --mca plm_rsh_agent "$AGENT"
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24")

# (stderr apart: OpenMPI's rsh launcher may warn that setpgid raced with its child's exec)
hosts=$(timeout 60 "${MPIRUN[@]}" hostname 2>"$TMP/hostname.err" | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')
if [ "$hosts" = "hosta:2 hostb:2 " ]; then ok "4 ranks on two hosts: $hosts"; else bad "rank placement: '$hosts'"; cat "$TMP/hostname.err"; fi

# ---- collectives, bit-exact
comm_prog="$(cd "$BUILD/test" && pwd)/test_comm"
for scratch in "" 256; do
  what="collectives across hosts${scratch:+, scratch $scratch bytes}"
  LLMC_COMM_TEST_SCRATCH=$scratch timeout 120 "${MPIRUN[@]}" "$comm_prog" > "$TMP/comm.log" 2>&1; rc=$?
  npass=$(grep -c "all [0-9]* checks passed" "$TMP/comm.log")
  nlocal=$(grep -c "(local [01] of 2)" "$TMP/comm.log")
  if [ $rc -eq 0 ] && [ "$npass" = 4 ] && [ "$nlocal" = 4 ]; then ok "$what: 4 ranks passed, 2 per host"
  else bad "$what: exit $rc, $npass of 4 passed, $nlocal ranks see 2 per host"; tail -30 "$TMP/comm.log"; fi
done

# ---- training: losses equal to one process
train_setup
for prog in train_gpt2 train_lora; do
  extra=(); [ $prog = train_lora ] && extra=("${LORA[@]}")
  "$BIN_DIR/$prog" "${COMMON[@]}" "${extra[@]}" --out "$TMP/${prog}_ref" > "$TMP/${prog}_ref.log" 2>&1 ||
    { tail "$TMP/${prog}_ref.log"; bad "$prog: single-process reference failed"; }
  for z in 1 2; do
    d="$TMP/${prog}_hosts_z$z"
    if timeout 120 "${MPIRUN[@]}" "$BIN_DIR/$prog" "${COMMON[@]}" "${extra[@]}" --zero $z --out "$d" > "$d.log" 2>&1; then
      cmp_losses "$prog, 4 ranks on 2 hosts, zero=$z, matches one process" "$TMP/${prog}_ref" "$d" 1e-5
    else tail -20 "$d.log"; bad "$prog 4 ranks on 2 hosts zero=$z failed"; fi
  done
done

# ZeRO 3 (parameters sharded, llmc/dist/fsdp.h): over all 4 ranks, and hybrid with one group per host
# (--shard-group 2: the units' gathers stay inside a host, one all-reduce per step crosses)
for sg in 0 2; do
  d="$TMP/z3_sg$sg"
  if timeout 120 "${MPIRUN[@]}" "$BIN_DIR/train_gpt2" "${COMMON[@]}" --zero 3 --shard-group $sg --out "$d" > "$d.log" 2>&1; then
    cmp_losses "train_gpt2, 4 ranks on 2 hosts, zero=3, shard groups of ${sg/#0/4}, matches one process" "$TMP/train_gpt2_ref" "$d" 1e-5
  else tail -20 "$d.log"; bad "train_gpt2 4 ranks on 2 hosts zero=3 --shard-group $sg failed"; fi
done
# LoRA: adapters only (the whole base sharded); training base tensors (LORA's biases and ln_f,
# kept whole on every rank outside the units); QLoRA (the NF4 base sharded in its packed form,
# gathered as bytes)
LORA3=(--lora-rank 4 --lora-alpha 8 --lora-targets all-linear)
LORAB3=("${LORA[@]}" --train-ln-f)
QLORA3=("${LORA3[@]}" --qlora)
for vl in "LORA3:adapters" "LORAB3:adapters, biases and ln_f" "QLORA3:QLoRA"; do
  v=${vl%%:*}
  declare -n args=$v
  "$BIN_DIR/train_lora" "${COMMON[@]}" "${args[@]}" --out "$TMP/${v}_ref" > "$TMP/${v}_ref.log" 2>&1 || bad "$v reference failed"
  if timeout 120 "${MPIRUN[@]}" "$BIN_DIR/train_lora" "${COMMON[@]}" "${args[@]}" --zero 3 --out "$TMP/$v" > "$TMP/$v.log" 2>&1; then
    cmp_losses "train_lora (${vl#*:}), 4 ranks on 2 hosts, zero=3, matches one process" "$TMP/${v}_ref" "$TMP/$v" 1e-5
  else tail -20 "$TMP/$v.log"; bad "train_lora $v 4 ranks on 2 hosts zero=3 failed"; fi
  unset -n args
done

# ---- a killed and a stopped rank on hostb (rank 3 and rank 2)
make_shard "$TMP/big.bin" 60000 100 6
LONG=(--model "$MODEL" --train-data "$TMP/big.bin" --batch-size 4 --seq-len 64 --steps 100000 --threads 1 --save-format none)
fault_test "across hosts, rank 3 killed" KILL 3 30 "$TMP/kill" \
  timeout 120 "${MPIRUN[@]}" "$BIN_DIR/train_gpt2" "${LONG[@]}" --zero 1 --out "$TMP/kill"
fault_test "across hosts, rank 2 stopped, --watchdog-timeout 5" STOP 2 60 "$TMP/stop" \
  timeout 120 "${MPIRUN[@]}" "$BIN_DIR/train_lora" "${LONG[@]}" "${LORA[@]}" --zero 2 --watchdog-timeout 5 --out "$TMP/stop"
# ---- a slow network (2 Mbit/s each way) is not a hang: a collective that takes longer than the
# watchdog's timeout but moves data chunk by chunk (64 KiB staging buffers) finishes
if ip netns exec "$NSA" tc qdisc add dev veth_a root tbf rate 2mbit burst 32kbit latency 400ms 2>/dev/null &&
   ip netns exec "$NSB" tc qdisc add dev veth_b root tbf rate 2mbit burst 32kbit latency 400ms 2>/dev/null; then
  LLMC_COMM_TEST_SCRATCH=65536 timeout 120 "${MPIRUN[@]}" "$comm_prog" --big-allreduce 100000 2 > "$TMP/slow.log" 2>&1; rc=$?
  secs=$(grep -m1 -o "took [0-9.]* s" "$TMP/slow.log" | awk '{print $2}')
  if [ $rc -eq 0 ] && [ "$(grep -c "checks passed" "$TMP/slow.log")" = 4 ] && awk -v s="${secs:-0}" 'BEGIN{exit !(s > 2)}'; then
    ok "2 Mbit/s network: an all-reduce of 100000 floats (twice) took ${secs}s > the 2 s timeout, progressed, and finished"
  else bad "slow network: exit $rc, took ${secs:-?}s"; cat "$TMP/slow.log" | cut -c1-400 | head -40; fi
  ip netns exec "$NSA" tc qdisc del dev veth_a root; ip netns exec "$NSB" tc qdisc del dev veth_b root
else
  echo "note: tc's tbf qdisc is not available: the slow-network check was skipped"
fi

for ns in "$NSA" "$NSB"; do
  n=$(ip netns pids "$ns" | wc -l)
  [ "$n" -eq 0 ] && ok "no process left in $ns" || bad "$n processes left in $ns"
done
finish
