"""Writes ../cases_loss.json: loss variants (ref.lm_loss) on small decoders, measured like
the other cases:

  /usr/bin/python3 gen_loss_cases.py
  nice /usr/bin/python3 measure.py ../cases_loss.json ../results_loss.json --jobs 2

legacy_shift: transformers 4.36-4.44's LlamaForCausalLM.forward (logits.float() in the
model, shift_logits = logits[..., :-1, :].contiguous(), CrossEntropyLoss).
"""
from gen_qlora_cases import llama, qwen2, run as qlora_run, write


def run(b, t, dtype, lora=None, ckpt=False, mode="pure"):
    r = qlora_run(b, t, 8, "all-linear", ckpt=ckpt, dtype=dtype)
    del r["quant"]
    r.update(loss_variant="legacy_shift", lora=lora, precision_mode=mode)
    return r


LORA = {"r": 8, "alpha": 16, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"], "dropout": 0.0}
CASES = [
    ("l01_llama_legacy_loss_bf16_lora", llama(256, 2, 4, 2, 688, 16000), run(2, 128, "bfloat16", LORA)),
    ("l02_llama_legacy_loss_fp32", llama(256, 2, 4, 2, 688, 16000), run(2, 96, "float32")),
    ("l03_qwen2_legacy_loss_bf16_full", qwen2(256, 2, 4, 2, 688, 16000), run(2, 128, "bfloat16")),
    ("l04_llama_legacy_loss_mixed_lora", llama(256, 2, 4, 2, 688, 16000),
     run(2, 128, "bfloat16", LORA, mode="mixed")),
]


def main():
    write("cases_loss.json", CASES)


if __name__ == "__main__":
    main()
