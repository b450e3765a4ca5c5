"""Writes ../cases_loss.json: loss variants (ref.lm_loss) on small decoders, measured like
the other cases:

  /usr/bin/python3 gen_loss_cases.py
  nice /usr/bin/python3 measure.py ../cases_loss.json ../results_loss.json --jobs 2

legacy_shift: transformers 4.36-4.44's LlamaForCausalLM.forward (logits.float() in the
model, shift_logits = logits[..., :-1, :].contiguous(), CrossEntropyLoss).
shift_float: the shift in bf16, then .float() and CrossEntropyLoss (Yxanul's FP8 model).
ce_noupcast: ForCausalLMLoss without logits.float(); num_items_in_batch: the Trainer's
count and fixed_cross_entropy's sum / count; litgpt_chunked: ref.litgpt_loss;
liger_fused: ref.LigerFLCE (Liger's algorithm; the Triton kernel's in-place row softmax
emulated with per-row vectors only).
"""
from gen_qlora_cases import llama, qwen2, run as qlora_run, write


def run(b, t, dtype, lora=None, ckpt=False, mode="pure", variant="legacy_shift", **extra):
    r = qlora_run(b, t, 8, "all-linear", ckpt=ckpt, dtype=dtype)
    del r["quant"]
    r.update(loss_variant=variant, lora=lora, precision_mode=mode, **extra)
    return r


LORA = {"r": 8, "alpha": 16, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"], "dropout": 0.0}
CASES = [
    ("l01_llama_legacy_loss_bf16_lora", llama(256, 2, 4, 2, 688, 16000), run(2, 128, "bfloat16", LORA)),
    ("l02_llama_legacy_loss_fp32", llama(256, 2, 4, 2, 688, 16000), run(2, 96, "float32")),
    ("l03_qwen2_legacy_loss_bf16_full", qwen2(256, 2, 4, 2, 688, 16000), run(2, 128, "bfloat16")),
    ("l04_llama_legacy_loss_mixed_lora", llama(256, 2, 4, 2, 688, 16000),
     run(2, 128, "bfloat16", LORA, mode="mixed")),
    # the cross-entropy without logits.float(); the Trainer's num_items_in_batch
    ("l05_llama_ce_noupcast_bf16_full", llama(256, 2, 4, 2, 688, 16000),
     run(2, 128, "bfloat16", variant="ce_noupcast")),
    ("l06_llama_num_items_bf16_lora", llama(256, 2, 4, 2, 688, 16000),
     run(2, 128, "bfloat16", LORA, variant="ce", num_items_in_batch=True)),
    # litgpt: lm_head chunked by tokens, chunked_cross_entropy, the logits list kept
    ("l07_llama_litgpt_chunked_bf16_lora", llama(256, 2, 4, 2, 688, 16000),
     run(2, 256, "bfloat16", LORA, variant="litgpt_chunked", loss_chunk=64)),
    ("l08_llama_litgpt_chunked_bf16_full_b1", llama(256, 2, 4, 2, 688, 16000),
     run(1, 384, "bfloat16", variant="litgpt_chunked", loss_chunk=128)),
    ("l09_qwen2_litgpt_chunked_fp32_full", qwen2(256, 2, 4, 2, 688, 8000),
     run(2, 160, "float32", variant="litgpt_chunked", loss_chunk=64)),
    # Liger's fused linear cross-entropy (ref.LigerFLCE, its algorithm on CPU)
    ("l10_llama_liger_bf16_full", llama(256, 2, 4, 2, 688, 16000),
     run(2, 256, "bfloat16", variant="liger_fused")),
    ("l11_llama_liger_bf16_lora", llama(256, 2, 4, 2, 688, 16000),
     run(2, 256, "bfloat16", LORA, variant="liger_fused")),
    ("l12_qwen2_liger_fp32_full_tied", qwen2(256, 2, 4, 2, 688, 8000),
     run(2, 192, "float32", variant="liger_fused")),
    ("l13_llama_liger_bf16_lora_ckpt", llama(384, 3, 6, 2, 1024, 32000),
     run(4, 128, "bfloat16", LORA, ckpt=True, variant="liger_fused")),
    # a model's own loss that shifts in bf16 before .float() (Yxanul's FP8 model file)
    ("l14_llama_shift_float_bf16_full", llama(256, 2, 4, 2, 688, 16000),
     run(2, 128, "bfloat16", variant="shift_float")),
    ("l15_llama_shift_float_bf16_lora", llama(256, 2, 4, 2, 688, 16000),
     run(2, 96, "bfloat16", LORA, variant="shift_float")),
]


def main():
    write("cases_loss.json", CASES)


if __name__ == "__main__":
    main()
