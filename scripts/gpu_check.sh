#!/usr/bin/env bash
# A short GPU check (<= 5 minutes on one GPU): a few real GRPO steps with rollouts from a vLLM server.
#
# What it does, on one GPU:
#   1. builds a tiny Qwen3 policy and a 2-member reward ensemble from configs (nothing downloaded);
#   2. starts `trl vllm-serve` on that policy (vLLM takes ~30% of the GPU memory);
#   3. runs `honestci train grpo` for 4 steps with use_vllm (server mode), bf16, on the same GPU;
#   4. reads the training log: rollouts came from vLLM, rewards from the gated ensemble, weights moved.
#
# Environments (vLLM pins its own CUDA torch, so it never shares the CPU venv):
#   GPU_PYTHON   python of a CUDA environment with vllm, trl, transformers, accelerate, datasets
#                (TRL's trainer side imports vLLM for the NCCL weight sync in server mode).
# Usage: GPU_PYTHON=/opt/gpu-venv/bin/python scripts/gpu_check.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-python}
WORK=${1:-$(mktemp -d /tmp/honestci-gpu-check.XXXXXX)}
PORT=${VLLM_PORT:-8765}
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"
echo "work folder: $WORK"
"$PY" -c "import torch, vllm, trl; assert torch.cuda.is_available(), 'no CUDA device'; print('torch', torch.__version__, 'vllm', vllm.__version__, 'trl', trl.__version__, torch.cuda.get_device_name(0))"

START=$(date +%s)
"$PY" - "$WORK" <<'PY'
import json, sys
from pathlib import Path
from honestci.training.tiny import build_tiny_causal_lm, fixture_texts
work = Path(sys.argv[1])
base = build_tiny_causal_lm(work / "base", fixture_texts())
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
members = []
for seed in (0, 1):  # untrained heads: this checks the plumbing, not reward quality
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, local_files_only=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(work / "rm" / f"member-seed{seed}"); tokenizer.save_pretrained(work / "rm" / f"member-seed{seed}")
    members.append({"seed": seed, "path": f"member-seed{seed}", "mean": 0.0, "std": 1.0})
(work / "rm" / "ensemble.json").write_text(json.dumps({"kind": "untrained", "ensemble_lambda": 0.5, "max_length": 512, "members": members}))
PY

"$PY" -m trl.scripts.vllm_serve --model "$WORK/base" --port "$PORT" --gpu_memory_utilization 0.3 \
    --max_model_len 1024 --enforce_eager > "$WORK/vllm.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; then break; fi
  if ! kill -0 $SERVER 2>/dev/null; then echo "vLLM server died:"; tail -40 "$WORK/vllm.log"; exit 1; fi
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "vLLM server not healthy after 120 s"; tail -40 "$WORK/vllm.log"; exit 1; }
echo "vLLM server up after $(( $(date +%s) - START )) s"

"$PY" -m honestci train grpo training/configs/grpo.yaml \
  --set model="$WORK/base" --set reward_model="$WORK/rm" --set output_dir="$WORK/policy" \
  --set max_steps=4 --set num_generations=4 --set per_device_train_batch_size=4 \
  --set max_completion_length=64 --set learning_rate=1e-4 --set vllm_server_port="$PORT" \
  --set 'trainer={save_strategy: "no"}' 2>&1 | tee "$WORK/grpo.log" | grep -v "it/s" | tail -25

"$PY" - "$WORK" <<'PY'
import json, sys
from pathlib import Path
from safetensors.torch import load_file
work = Path(sys.argv[1])
rows = [json.loads(l) for l in (work / "policy" / "training_log.jsonl").read_text().splitlines()]
steps = [r for r in rows if "reward" in r]
a, b = load_file(work / "base" / "model.safetensors"), load_file(work / "policy" / "model.safetensors")
changed = sum(not a[k].equal(b[k].to(a[k].dtype)) for k in a if k in b)
rewards = [json.loads(l) for l in (work / "policy" / "rewards.jsonl").read_text().splitlines()]
print(f"GRPO steps logged: {len(steps)}; step_time s: {[round(r.get('step_time', float('nan')), 3) for r in steps]}")
print(f"tensors changed: {changed}/{len(a)}; reward batches scored by the gated ensemble: {len(rewards)}")
assert len(steps) == 4 and changed > 0 and len(rewards) == 4, "GPU check failed"
print("GPU CHECK PASSED")
PY
echo "total $(( $(date +%s) - START )) s"
