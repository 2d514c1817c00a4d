#!/usr/bin/env bash
# Runs one MPI rank as if its node were one of SIM_NODES nodes: ranks are split into SIM_NODES equal
# consecutive groups, each with its own NCCL_HOSTID, so NCCL moves data between groups as between hosts.
#
#   mpirun -np 4 -x SIM_NODES=2 -x NCCL_IB_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo \
#       -x NCCL_NVLS_ENABLE=0 benchmarks/simnode.sh train --config ...
#
# With NCCL's socket transport on loopback the groups talk over TCP, about a 25 Gb/s link on the GPU
# hosts (docs/PERFORMANCE.md); inside a group NCCL still uses NVLink. SIM_NODES=1 (the default) changes
# nothing. The rank and size come from Open MPI's environment (or RANK and WORLD_SIZE).
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:-${RANK:-0}}
size=${OMPI_COMM_WORLD_SIZE:-${WORLD_SIZE:-1}}
nodes=${SIM_NODES:-1}
if ((nodes < 1 || size % nodes != 0)); then
  echo "simnode.sh: SIM_NODES=$nodes does not divide the $size ranks" >&2
  exit 2
fi
if ((nodes > 1)); then
  export NCCL_HOSTID="simnode$((rank / (size / nodes)))"
fi
exec "$@"
