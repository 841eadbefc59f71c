#!/usr/bin/env bash
# The GPU check (one H200, hard limit 8 minutes): a few real GRPO steps with vLLM in colocate mode.
#
# What it does, on one GPU (no separate vLLM server: a server on the trainer's GPU breaks NCCL's
# weight sync with "Duplicate GPU detected"):
#   1. the policy: a small real model from $QWEN_0_5B (a local Qwen2.5-0.5B-Instruct folder; nothing is
#      downloaded) or, when that is unset or missing, the tiny model built from a config (said so);
#   2. a 3-member reward ensemble on the policy's backbone (untrained heads, seeds 0 1 2, saved in bf16:
#      this checks the plumbing, not reward quality);
#   3. the memory plan of that job on this GPU (`honestci train grpo --dry-run`);
#   4. 4 GRPO steps (`train_grpo`, vllm_mode colocate, bf16), then tokens/s and peak memory
#      (torch.cuda.max_memory_allocated of the trainer + colocated vLLM process, and the device's used
#      memory from torch.cuda.mem_get_info);
#   5. the training-health gate on the run's log and an audit of the fixture study (exit 0 or 1).
#
# Environment: GPU_PYTHON = python of the GPU venv (requirements-gpu.txt; docs/gpu.md), with honestci
# installed in it. Usage: GPU_PYTHON=/opt/gpu-venv/bin/python [QWEN_0_5B=/models/Qwen2.5-0.5B-Instruct] \
#   scripts/gpu_check.sh [WORKDIR]
set -euo pipefail
if [ -z "${HONESTCI_GPU_CHECK_TIMED:-}" ]; then
  export HONESTCI_GPU_CHECK_TIMED=1
  exec timeout 480 bash "$0" "$@"
fi
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-python}
WORK=${1:-$(mktemp -d /tmp/honestci-gpu-check.XXXXXX)}
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"
echo "work folder: $WORK"
START=$(date +%s)
"$PY" -c "import torch, vllm, trl, transformers; assert torch.cuda.is_available() and torch.version.cuda, 'no CUDA torch/device'; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| vllm', vllm.__version__, '| trl', trl.__version__, '| transformers', transformers.__version__, '|', torch.cuda.get_device_name(0))"

if [ -n "${QWEN_0_5B:-}" ] && [ -f "$QWEN_0_5B/config.json" ]; then
  POLICY=$QWEN_0_5B
  echo "policy: $POLICY (small real model)"
else
  POLICY=$WORK/base
  echo "policy: QWEN_0_5B is unset or has no config.json; using the tiny model built from a config (plumbing only)"
fi

"$PY" - "$WORK" "$POLICY" <<'PY'
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
work, policy = Path(sys.argv[1]), Path(sys.argv[2])
if not (policy / "config.json").is_file():
    from honestci.training.tiny import build_tiny_causal_lm, fixture_texts
    build_tiny_causal_lm(policy, fixture_texts())
tokenizer = AutoTokenizer.from_pretrained(policy, local_files_only=True)
members = []
for seed in (0, 1, 2):  # untrained heads: the plumbing, not reward quality
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1, local_files_only=True, dtype=torch.bfloat16)
    model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = work / "rm" / f"member-seed{seed}"
    model.save_pretrained(out); tokenizer.save_pretrained(out)
    members.append({"seed": seed, "path": out.name, "mean": 0.0, "std": 1.0})
(work / "rm" / "ensemble.json").write_text(json.dumps({"kind": "untrained", "ensemble_lambda": 0.5, "max_length": 512, "members": members}))
print(f"reward ensemble: 3 members in {work / 'rm'}")
PY

SETS=(--set model="$POLICY" --set reward_model="$WORK/rm" --set output_dir="$WORK/policy"
  --set max_steps=4 --set num_generations=4 --set per_device_train_batch_size=4 --set thinking=false
  --set max_completion_length=128 --set learning_rate=1.0e-5 --set gpus=1 --set vllm_mode=colocate
  --set vllm_gpu_memory_utilization=0.3 --set 'trainer={save_strategy: "no", vllm_max_model_length: 1024}')
"$PY" -m honestci train grpo training/configs/grpo.yaml "${SETS[@]}" --dry-run --gpus 1 \
  --gpu-memory-gib "$("$PY" -c 'import torch; print(round(torch.cuda.mem_get_info()[1] / 2**30, 1))')" \
  --gpu-name "$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0).replace(" ", "-"))')" \
  --launch-dir "$WORK/launch"

"$PY" - "$WORK" "${SETS[@]}" <<'PY' 2>&1 | tee "$WORK/grpo.log" | grep -v "it/s"
import json, sys
from pathlib import Path
import torch
from honestci.audit.checks.training_health import assess_training_log
from honestci.training.config import load_config
from honestci.training.grpo import GRPOJob, train_grpo
work, args = Path(sys.argv[1]), sys.argv[2:]
overrides = [args[i + 1] for i in range(0, len(args), 2)]  # "--set" KEY=VALUE pairs
job = load_config(GRPOJob, "training/configs/grpo.yaml", overrides)
run = train_grpo(job, lambda line: print(line, flush=True))
print(run)
free, total = torch.cuda.mem_get_info()
state = json.loads((work / "policy" / "trainer_state.json").read_text())
steps = [r for r in state["log_history"] if "reward" in r]
tokens = sum(r.get("completions/mean_length", 0.0) * job.per_device_train_batch_size for r in steps)
print(f"GRPO steps logged: {len(steps)}; completion tokens {tokens:.0f} in {run.seconds:.1f} s = {tokens / run.seconds:.1f} tokens/s")
print(f"peak memory: torch.cuda.max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB; "
      f"device used now {(total - free) / 2**30:.2f} of {total / 2**30:.1f} GiB")
rewards = [json.loads(l) for l in (work / "policy" / "rewards.jsonl").read_text().splitlines()]
print(f"reward batches scored by the gated ensemble: {len(rewards)}")
print(assess_training_log(run.training_log))
assert len(steps) == 4 and len(rewards) >= 4, "GPU check failed: steps or reward batches missing"
PY

set +e
"$PY" -m honestci audit fixtures/study/claim.yaml --out "$WORK/audit" --no-bayes -q
AUDIT=$?
set -e
[ "$AUDIT" -le 1 ] || { echo "audit failed to run (exit $AUDIT)"; exit 1; }
echo "audit of the fixture study: exit $AUDIT (0 release, 1 blocked: both are a working audit)"
echo "GPU CHECK PASSED in $(( $(date +%s) - START )) s"
