# Sourced by tools/gpu_check.sh and tools/gpu_profile.sh: gpu_libs DIR prints the library path the
# binaries of `make gpu-build` (in DIR) need on a GPU machine that has neither our libraries nor a
# system cuBLAS/NCCL: DIR/lib, every part of PyTorch's nvidia namespace package (cuBLAS, cuDNN and
# NCCL may sit in different ones), and the build machine's libstdc++ (DIR/lib/cxx) only where the
# machine's own is too old for them.
gpu_libs() {
  local dir=$1 libs="$PWD/$1/lib" root d
  for root in $(python3 -c "import nvidia; print('\n'.join(nvidia.__path__))" 2>/dev/null); do
    for d in $(find "$root" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u); do libs="$libs:$d"; done
  done
  if LD_LIBRARY_PATH="$libs" ldd "$dir/bin/train" 2>&1 | grep -q 'GLIBCXX\|CXXABI\|GCC_[0-9]'; then
    libs="$libs:$PWD/$dir/lib/cxx"
  fi
  echo "$libs"
}
