#!/usr/bin/env bash
# Builds the SOTU evaluation / calibration splits from data/sotu-corpus.tar.xz (see data/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d data/sotu ] || [ "$(ls data/sotu | wc -l)" != 233 ]; then
  rm -rf data/sotu
  tar -C data -xJf data/sotu-corpus.tar.xz
fi
join() {  # files... -> stdout, joined with a blank line, no trailing separator
  local first=1
  for f in "$@"; do
    if [ $first = 0 ]; then printf '\n\n'; fi
    cat "$f"
    first=0
  done
}
mapfile -t all < <(ls data/sotu/*.txt | LC_ALL=C sort)
eval_files=(); calib_files=()
for f in "${all[@]}"; do
  y=$(basename "$f" | cut -c1-4)
  if [ "$y" -ge 1980 ]; then eval_files+=("$f"); else calib_files+=("$f"); fi
done
join "${eval_files[@]}" > data/sotu-eval.txt.part && mv data/sotu-eval.txt.part data/sotu-eval.txt
join "${calib_files[@]}" > data/sotu-calib.txt.part && mv data/sotu-calib.txt.part data/sotu-calib.txt
join "${all[@]}" > data/sotu-all.txt.part && mv data/sotu-all.txt.part data/sotu-all.txt
sha256sum -c --quiet data/sotu-splits.sha256
echo "== data: $(wc -w < data/sotu-eval.txt) words evaluation (${#eval_files[@]} addresses), $(wc -w < data/sotu-calib.txt) words calibration (${#calib_files[@]} addresses)"
