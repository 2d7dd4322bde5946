# Shared by the GPU-machine scripts (bench/cuda_device_run.sh, bench/compress_device_run.sh):
# paths, logging, the cuda-release build and the default model's reassembly from its parts.
# Sourced, not run.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
B=build-cuda
L=$B/bin/lithe
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
log() { echo "== $*"; }

# GPU name into $OUT/gpu.txt, then configure + build cuda-release (Ubuntu's g++ on the GPU hosts
# raises false-positive warnings, hence WERROR off); exits on failure with the errors shown.
# Optional: CUDA_ARCHS (e.g. 90a-real: half the compile time of the default 80-real 90a-real) and
# the targets to build as arguments (default: all).
build_cuda() {
  nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
  cmake --preset cuda-release -B $B -DLITHE_WERROR=OFF ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} \
    > "$OUT/cmake.txt" 2>&1 || { tail -30 "$OUT/cmake.txt"; exit 1; }
  ( time cmake --build $B -j16 ${1:+--target "$@"} ) > "$OUT/build.txt" 2>&1 ||
    { grep -E "error" -A3 "$OUT/build.txt" | head -60; exit 1; }
  tail -3 "$OUT/build.txt"
}

# The default model from models/part-0* (sent in parts: one call carries at most 64 MiB).
assemble_model() {
  if [ ! -f $M ] && [ -f models/part-00 ]; then cat models/part-0* > $M && rm -f models/part-0*; fi
  [ -f $M ] || { echo "no $M (send it in parts: split -n 4 -d $M models/part-)"; exit 1; }
  sha256sum $M | tee "$OUT/model_sha.txt"
}

# A baseline build for side-by-side runs of a change that no environment switch can turn off: a
# copy of the tree in /tmp/base with the files of DIR laid over it (DIR mirrors the repository's
# paths, e.g. DIR/src/kernels/cuda/gq_gemv.cu saved locally by `git show HEAD:src/... > ...`; an
# untracked DIR travels with the tree), built for TARGETS into /tmp/base/$B. Runs beside
# build_cuda: `build_baseline ab lithe bench_cuda_gq_gemv & build_cuda; wait`.
build_baseline() {
  local dir=$1 out; shift
  out=$(cd "$OUT" && pwd)
  rm -rf /tmp/base && mkdir -p /tmp/base
  tar --exclude='./build*' --exclude=./models --exclude=./out --exclude=./.git -cf - . | tar -xf - -C /tmp/base
  cp -r "$dir/." /tmp/base/
  ( cd /tmp/base && cmake --preset cuda-release -B $B -DLITHE_WERROR=OFF ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} \
      > "$out/base_cmake.txt" 2>&1 &&
    cmake --build $B -j8 --target "$@" > "$out/base_build.txt" 2>&1 ) || { echo "baseline build failed ($out/base_build.txt)"; return 1; }
  echo "baseline built: /tmp/base/$B/bin"
}
