#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the main job: train the paper's RNN (docs/method.md §5: tanh RNN,
# hidden 20, Linear 20→10, T = 1000, batch 16, Adam, seed 4202) on the bitstream task with a
# BPPSA backward pass over the 32,000 training sequences, with test accuracy on the 18,000
# held-out ones after every epoch; then time one epoch of sequential BP on a copy of the trained
# model (the same batches), check one batch's BPPSA gradients against BP's, and print BP's
# epoch time beside the scan's.
#   scripts/run.sh           learning run: the hybrid (chunked) scan, 4 epochs, Adam lr 2e-3
#                            falling to 0 along a cosine (--lr-schedule cosine), gradient norm
#                            clipped at 1: the model learns and settles (docs/training.md), in
#                            about two minutes on 2 cores
#   scripts/run.sh --paper   the paper's exact settings: the Blelloch scan, 1 epoch, lr 3e-5, no
#                            clipping
# Further arguments go to `bppsa train` and replace the defaults they name, e.g.
#   scripts/run.sh --epochs 5 --save rnn.safetensors
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
paper=0
for a in "$@"; do
  if [ "$a" = "--paper" ]; then paper=1; else args+=("$a"); fi
done
given() {  # is the flag among the user's arguments (as --flag value or --flag=value)?
  local f
  for f in "${args[@]+"${args[@]}"}"; do [ "${f%%=*}" = "$1" ] && return 0; done
  return 1
}
cmd=(build/bppsa train)
default() {  # flag [value]: added unless the user gave the flag
  given "$1" || cmd+=("$@")
}
default --model rnn
default --hidden 20
default --data bitstream
default --steps 1000
default --batch 16
default --seed 4202
if [ "$paper" = 1 ]; then
  default --backward blelloch
  default --epochs 1
  default --lr 3e-5
else
  default --backward hybrid
  default --epochs 4
  default --lr 2e-3
  default --lr-schedule cosine
  default --clip-grad-norm 1
fi
default --check
default --compare-bp

scripts/setup.sh
echo "+ ${cmd[*]} ${args[*]+"${args[*]}"}"
exec "${cmd[@]}" "${args[@]+"${args[@]}"}"
