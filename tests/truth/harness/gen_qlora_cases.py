"""Writes ../cases_qlora.json: QLoRA steps (bitsandbytes Linear4bit + peft LoRA, bnb_ref.py)
on small Llama / Qwen decoders in pure bf16 (compute dtype = model dtype, no autocast),
measured like the other cases:

  /usr/bin/python3 gen_qlora_cases.py
  nice /usr/bin/python3 measure.py ../cases_qlora.json ../results_qlora.json --jobs 2
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
QKVO = ["q_proj", "k_proj", "v_proj", "o_proj"]


def llama(h, layers, heads, kv, inter, vocab, tie=False):
    return {"model_type": "llama", "hidden_size": h, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": inter,
            "vocab_size": vocab, "tie_word_embeddings": tie, "rms_norm_eps": 1e-05,
            "hidden_act": "silu", "rope_theta": 10000.0, "attention_bias": False}


def qwen2(h, layers, heads, kv, inter, vocab):
    c = llama(h, layers, heads, kv, inter, vocab, tie=True)
    c.update(model_type="qwen2", attention_bias=True, rope_theta=1000000.0, rms_norm_eps=1e-06)
    return c


def run(b, t, r, targets, dq=False, ckpt=False, dtype="bfloat16", prepare=False):
    return {"batch": b, "seq": t, "dtype": dtype, "precision_mode": "pure", "optimizer": "adamw",
            "foreach": False, "lr": 0.0001, "weight_decay": 0.01, "grad_ckpt": ckpt,
            "loss_variant": "ce", "lora": {"r": r, "alpha": 2 * r, "targets": targets,
                                           "dropout": 0.0},
            "quant": dict({"type": "nf4", "double_quant": dq}, **({"prepare": True} if prepare else {})),
            "frozen": [], "generate_tokens": 0}


CASES = [
    ("q01_llama_qlora_qkvo_bf16", llama(512, 4, 8, 2, 1408, 8000), run(2, 128, 16, QKVO)),
    ("q02_llama_qlora_all_bf16", llama(512, 4, 8, 2, 1408, 8000), run(2, 128, 16, "all-linear")),
    ("q03_llama_qlora_all_dq_bf16", llama(512, 4, 8, 2, 1408, 8000),
     run(2, 128, 16, "all-linear", dq=True)),
    ("q04_llama_qlora_all_ckpt_bf16", llama(512, 4, 8, 2, 1408, 8000),
     run(2, 128, 16, "all-linear", ckpt=True)),
    ("q05_qwen2_qlora_qkvo_bf16", qwen2(384, 3, 6, 2, 1024, 16000), run(4, 64, 8, QKVO)),
    ("q06_llama_qlora_all_fp32", llama(256, 3, 4, 4, 688, 4000), run(2, 96, 8, "all-linear",
                                                                      dtype="float32")),
    # peft prepare_model_for_kbit_training: every non-quantized parameter cast to fp32, so
    # the residual stream, attention and logits run in fp32 around bf16 4-bit matmuls
    ("q07_llama_qlora_prepared_qkvo_bf16", llama(512, 4, 8, 2, 1408, 8000),
     run(2, 128, 16, QKVO, prepare=True)),
    ("q08_llama_qlora_prepared_all_dq_bf16", llama(512, 3, 8, 2, 1408, 8000),
     run(2, 128, 16, "all-linear", dq=True, prepare=True)),
    ("q09_qwen2_qlora_prepared_qkvo_bf16", qwen2(384, 3, 6, 2, 1024, 16000),
     run(4, 64, 8, QKVO, prepare=True)),
]


def write(name, cases):
    out = [{"id": i, "family": "decoder", "config": c, "run": r} for i, c, r in cases]
    with open(os.path.join(HERE, "..", name), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def main():
    write("cases_qlora.json", CASES)


if __name__ == "__main__":
    main()
