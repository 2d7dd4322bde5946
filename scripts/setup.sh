#!/usr/bin/env bash
# The first README command: installs everything, builds lithe, fetches the default model and
# runs the main job on it (today: inspect the model, export it as a Hugging Face directory, and
# answer a prompt with it).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
echo "== building (preset release; CUDA when nvcc is found)"
cmake --preset release >/dev/null
cmake --build --preset release
bash scripts/fetch-model.sh
bash scripts/make-data.sh

echo "== main job: lithe inspect"
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
build/bin/lithe inspect "$MODEL"
echo "== main job: lithe export --format hf"
build/bin/lithe export -m "$MODEL" -o out/smollm2-hf --format hf --dtype f16 --force
ls -l out/smollm2-hf
echo "== main job: lithe generate"
build/bin/lithe generate -m "$MODEL" -p "The three branches of the United States government are" -n 48 --temp 0
