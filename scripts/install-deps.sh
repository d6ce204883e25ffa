#!/usr/bin/env bash
# Installs the Debian 12 packages rmp needs to build, test and benchmark -- only those missing.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (does nothing when all are in).
set -euo pipefail

packages=(
  g++ make cmake pkg-config python3          # toolchain; python3 runs benchmarks/compare
  libhwloc-dev hwloc                          # topology and binding
  libgtest-dev libgmock-dev googletest        # unit tests
  libbenchmark-dev                            # micro-benchmarks of hot paths
  libibverbs-dev librdmacm-dev                # verbs transport
  openmpi-bin libopenmpi-dev                  # peers of benchmarks/compare: OpenMPI and
  mpich libmpich-dev                          #   MPICH (coexist: mpicxx.openmpi, mpicxx.mpich)
  gnuplot-nox                                 # benchmarks/compare's plots
)

missing=()
for p in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
sudo=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: not root and no sudo: install them by hand" >&2
    exit 1
  fi
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
echo "+ apt-get update"
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update
echo "+ apt-get install -y ${missing[*]}"
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y "${missing[@]}"
