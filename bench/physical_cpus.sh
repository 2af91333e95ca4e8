#!/bin/sh
# One logical CPU per physical core, in (socket, core) order, one per line (from `lscpu -p=CPU,CORE,SOCKET`):
# the CPUs bench/cpu_sweep_pinned.sh and bench/cpu_profile.sh pin their runs to (bench/sgemm_vs_torch.py --pin
# picks the same ones in Python).
lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | sort -t, -k3,3n -k2,2n -k1,1n | awk -F, '!seen[$3","$2]++ {print $1}'
