#!/usr/bin/env bash
# A stand-in for ssh, for OpenMPI's plm_rsh_agent, that "logs in" to a host simulated by a network
# namespace on this machine (test/test_multihost.sh; docs/MULTINODE.md). OpenMPI runs it as
#   netns_rsh.sh [ssh-style options] HOST COMMAND...
# and it runs COMMAND (one shell command line, as ssh would) inside the namespace that plays HOST,
# in its own UTS namespace with HOST as the hostname: OpenMPI tells nodes apart by hostname, so
# every simulated host needs its own. The mapping comes from the environment, which mpirun passes
# on to its agent:
#   LLMC_NETNS_HOSTS="hosta=netns_a hostb=netns_b ..."
# Needs root (ip netns exec, unshare).
set -u
while [ "$#" -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F|-E) shift 2 ;; # ssh options with a value
    -*) shift ;;
    *) break ;;
  esac
done
if [ "$#" -lt 2 ]; then echo "netns_rsh.sh: usage: netns_rsh.sh HOST COMMAND..." >&2; exit 255; fi
host=$1; shift
ns=
for pair in ${LLMC_NETNS_HOSTS:-}; do
  if [ "${pair%%=*}" = "$host" ]; then ns=${pair#*=}; fi
done
if [ -z "$ns" ]; then
  echo "netns_rsh.sh: host '$host' is not in LLMC_NETNS_HOSTS='${LLMC_NETNS_HOSTS:-}'" >&2
  exit 255
fi
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname '$host' && exec $*"
