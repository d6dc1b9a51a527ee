#!/usr/bin/env bash
# JoeyNMT 2.3.0, the peer of README's Performance section, on the same data, architecture and
# wall-clock budget as minimt's default run:
#
#   bash scripts/peers/joeynmt.sh                 # 30 minutes of training, then beam-5 test
#   bash scripts/peers/joeynmt.sh --minutes 5     # a shorter budget (bench/benchmark.py --compare)
#
# Same as minimt: Multi30k de->en (checksum-verified, from data.url / MINIMT_DATA_URL), one
# joint 8k BPE vocabulary (SentencePiece: JoeyNMT's own BPE option), 3+3 pre-LN layers, d_model
# 256, 4 heads, ff 1024, dropout 0.1, tied embeddings and softmax, ~4,096 padded tokens per
# batch, Adam (0.9, 0.98), label smoothing 0.1, clip 1.0, greedy val BLEU every 100 steps, beam 5
# (alpha 1) on test. The schedule is the study's, peak lr 1e-3 after 800 warm-up steps then
# inverse sqrt: minimt's default until 2026-11-23 (now 2e-3 after 400), kept so that the
# committed peer results stay reproducible. JoeyNMT's own defaults otherwise (fp32, its batching
# and decoding). Training stops after `--minutes` of training; the best checkpoint (val BLEU) is
# then tested.
#
# Needs minimt's environment (.venv: `make setup`) for the data and the log parsing
# (joeynmt_logs.py, beside this script). Writes outputs/peers/joeynmt/{venv,data,model,
# results.json}; the venv is reused on a second run.
set -euo pipefail

MINUTES=30
VALIDATION_FREQ=100
while [[ $# -gt 0 ]]; do
    case "$1" in
        --minutes) MINUTES="$2"; shift 2 ;;
        --validation-freq) VALIDATION_FREQ="$2"; shift 2 ;;
        *) echo "unknown argument $1 (usage: $0 [--minutes N] [--validation-freq STEPS])" >&2; exit 2 ;;
    esac
done

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
LOGS="$HERE/joeynmt_logs.py"
OUT="${JOEYNMT_OUT:-$ROOT/outputs/peers/joeynmt}"
MINIMT_PY="$ROOT/.venv/bin/python"
DATA_URL="${MINIMT_DATA_URL:-https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw}"
TORCH="${TORCH:-torch==2.13.0}"
[[ -x "$MINIMT_PY" ]] || { echo "minimt's environment is missing: run 'make setup' first" >&2; exit 1; }

mkdir -p "$OUT"
VENV="$OUT/venv"
if [[ ! -f "$VENV/.installed" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -c "import torch" 2>/dev/null || "$VENV/bin/pip" install -q "$TORCH"
    # importlib-metadata: imported by joeynmt.helpers, missing from its requirements;
    # sentencepiece < 0.2: 0.2 dropped SetVocabulary, which JoeyNMT 2.3.0 calls
    "$VENV/bin/pip" install -q joeynmt==2.3.0 importlib-metadata "sentencepiece<0.2"
    touch "$VENV/.installed"
fi

DATA="$OUT/data"
"$MINIMT_PY" "$LOGS" export "$DATA_URL" "$ROOT/data/multi30k" "$DATA"
if [[ ! -f "$DATA/spm8k.model" ]]; then
    "$VENV/bin/python" - "$DATA" <<'EOF'
import sys
import sentencepiece as spm

data = sys.argv[1]
spm.SentencePieceTrainer.train(
    input=[f"{data}/train.de", f"{data}/train.en"], model_prefix=f"{data}/spm8k",
    vocab_size=8000, model_type="bpe", character_coverage=1.0,
    unk_id=0, pad_id=1, bos_id=2, eos_id=3, pad_piece="<pad>", minloglevel=2,
)
sp = spm.SentencePieceProcessor(model_file=f"{data}/spm8k.model")
with open(f"{data}/vocab.txt", "w", encoding="utf-8") as vocab:
    vocab.writelines(sp.id_to_piece(i) + "\n" for i in range(sp.get_piece_size()))
EOF
fi

MODEL="$OUT/model"
CONFIG="$OUT/config.yaml"
side() {  # the data section of one language
    cat <<EOF
    lang: $1
    level: bpe
    lowercase: false
    max_length: 100
    voc_file: $DATA/vocab.txt
    tokenizer_type: sentencepiece
    tokenizer_cfg:
      model_file: $DATA/spm8k.model
EOF
}
layers() {  # an encoder or decoder
    cat <<EOF
    type: transformer
    num_layers: 3
    num_heads: 4
    embeddings: {embedding_dim: 256, scale: true, dropout: 0.1}
    hidden_size: 256
    ff_size: 1024
    dropout: 0.1
    layer_norm: pre
EOF
}
cat > "$CONFIG" <<EOF
name: multi30k_de_en
joeynmt_version: 2.3.0
model_dir: $MODEL
data:
  train: $DATA/train
  dev: $DATA/val
  test: $DATA/test_2016_flickr
  dataset_type: plain
  src:
$(side de)
  trg:
$(side en)
testing:
  beam_size: 5
  beam_alpha: 1.0
  batch_size: 819
  batch_type: token
  eval_metrics: [bleu]
  sacrebleu_cfg: {tokenize: 13a}
training:
  random_seed: 1
  optimizer: adam
  adam_betas: [0.9, 0.98]
  scheduling: warmupinversesquareroot
  learning_rate: 0.001
  learning_rate_warmup: 800
  learning_rate_min: 1.0e-8
  label_smoothing: 0.1
  normalization: tokens
  clip_grad_norm: 1.0
  batch_size: 4096
  batch_type: token
  epochs: 1000
  validation_freq: $VALIDATION_FREQ
  logging_freq: $(( VALIDATION_FREQ < 100 ? VALIDATION_FREQ / 2 : 50 ))
  early_stopping_metric: bleu
  keep_best_ckpts: 1
  overwrite: true
  shuffle: true
  use_cuda: false
  print_valid_sents: [0]
model:
  initializer: xavier_uniform
  embed_initializer: xavier_uniform
  tied_embeddings: true
  tied_softmax: true
  encoder:
$(layers)
  decoder:
$(layers)
EOF

# Train, interrupted (SIGINT: JoeyNMT ends its loop, keeping its checkpoints) after MINUTES of
# training from its first epoch, its validations not counted (minimt's budget counts its own).
# SIGINT is restored first: a process started in the background inherits it ignored.
rm -rf "$MODEL"
"$VENV/bin/python" -c '
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv[0] = "joeynmt"
runpy.run_module("joeynmt", run_name="__main__")
' train "$CONFIG" --skip-test >"$OUT/train.out" 2>&1 &
TRAIN_PID=$!
"$MINIMT_PY" "$LOGS" stop-after "$MODEL/train.log" "$TRAIN_PID" "$MINUTES" "$OUT/budget.json"
wait "$TRAIN_PID" || { tail -20 "$OUT/train.out" >&2; exit 1; }

[[ -f "$MODEL/best.ckpt" ]] || {
    echo "JoeyNMT validated no checkpoint in $MINUTES minutes: raise --minutes or lower --validation-freq" >&2
    exit 1
}
# Test model_dir/best.ckpt (by val BLEU, as minimt does) with beam 5; JoeyNMT logs its generation time.
rm -f "$MODEL/test.log"
"$VENV/bin/python" -m joeynmt test "$CONFIG" --output-path "$OUT/hyps" >"$OUT/test.out" 2>&1
"$MINIMT_PY" "$LOGS" results "$MODEL" "$OUT/hyps.test" "$DATA/test_2016_flickr.en" \
    "$OUT/results.json" --merge "$OUT/budget.json"
