"""The routing a measured MoE case's forward sees: per MoE layer, the busiest
expert's assignments over the balanced share (rows x top_k / experts), the value
run.moe.imbalance takes. Builds the case as probe.py does (same seeds, LoRA and
casts; no checkpointing, no tracing) and runs one forward under no_grad with the
initial weights (a training case's step 2 runs after one optimizer step: close,
not identical).

  /usr/bin/python3 routing.py ../cases_public.json ID [ID...]
"""
import json
import sys

import torch
import torch.nn.functional as F

import probe
import ref


def routing(case):
    torch.set_num_threads(1)
    family, cfg, run = case["family"], case["config"], case["run"]
    dt = probe.DTYPES[run.get("dtype", "float32")]
    mixed = run.get("precision_mode", "pure") == "mixed"
    train = run.get("optimizer", "adamw") not in (None, "none")
    torch.manual_seed(int(run.get("seed", 0)))
    model = ref.build(family, cfg)
    if not mixed and dt != torch.float32:
        model.to(dt)
    lora = run.get("lora")
    if lora:
        ref.add_lora(model, int(lora["r"]), float(lora.get("alpha") or 2 * lora["r"]),
                     lora.get("targets") or ["q_proj", "k_proj", "v_proj", "o_proj"],
                     dropout=float(lora.get("dropout") or 0.0))
    x = probe.inputs(family, cfg, run, train, torch.Generator().manual_seed(1234))
    seen = []
    forward = ref.SparseMoe.forward

    def record(self, h):
        flat = h.reshape(-1, h.shape[-1])
        w = F.softmax(self.gate(flat), dim=1, dtype=torch.float)
        chosen = torch.topk(w, self.k, dim=-1)[1]
        counts = torch.bincount(chosen.reshape(-1), minlength=self.E)
        seen.append(counts.max().item() * self.E / (flat.shape[0] * self.k))
        return forward(self, h)

    ref.SparseMoe.forward = record
    amp = (lambda: torch.autocast("cpu", dtype=dt)) if mixed else probe.contextlib.nullcontext
    with torch.no_grad(), amp():
        probe.logits_of(model, family, x)
    return seen


def main():
    cases = {c["id"]: c for c in json.load(open(sys.argv[1]))}
    for cid in sys.argv[2:]:
        print(cid, " ".join(f"{r:.3f}" for r in routing(cases[cid])))


if __name__ == "__main__":
    main()
