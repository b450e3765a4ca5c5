"""Writes ../cases_load.json: the load phase (probe.load_model) before a training step, on
small decoders, measured like the other cases; results carry load_peak_bytes:

  /usr/bin/python3 gen_load_cases.py
  nice /usr/bin/python3 measure.py ../cases_load.json ../results_load.json --jobs 2

The checkpoint is a model built before profiling (host memory, in load.from); tensors
arrive one at a time in module order. cast: host (cast before the copy, transformers'
way), tensor (each tensor cast on the device), device (the whole model in the checkpoint
dtype, then model.to(dtype)); with quant, each linear weight quantized on arrival.
"""
from gen_qlora_cases import QKVO, llama, qwen2, run as qlora_run, write


def run(b, t, dtype, load, quant=None, lora=None):
    r = qlora_run(b, t, 8, QKVO, dtype=dtype)
    r.update(load=load, lora=lora)
    if quant:
        r["quant"] = quant
        r["lora"] = {"r": 8, "alpha": 16, "targets": "all-linear", "dropout": 0.0}
    else:
        del r["quant"]
    return r


CASES = [
    ("d01_llama_load_fp32_cast_on_device_bf16", llama(256, 2, 4, 2, 688, 16000),
     run(2, 64, "bfloat16", {"from": "float32", "cast": "device"})),
    ("d02_llama_load_fp32_cast_per_tensor_bf16", llama(256, 2, 4, 2, 688, 16000),
     run(2, 64, "bfloat16", {"from": "float32", "cast": "tensor"})),
    ("d03_qwen2_load_fp32_cast_on_device_bf16_tied", qwen2(256, 3, 4, 2, 688, 12000),
     run(2, 64, "bfloat16", {"from": "float32", "cast": "device"})),
    ("d04_llama_load_bf16_host_bf16", llama(256, 2, 4, 2, 688, 16000),
     run(2, 64, "bfloat16", {"from": "bfloat16", "cast": "host"})),
    # a small vocabulary: the last linear's quantization transient outlasts the head
    ("d05_llama_qlora_quantize_on_load_small_vocab", llama(512, 3, 8, 2, 1408, 256),
     run(2, 64, "bfloat16", {"from": "bfloat16", "cast": "host"},
         quant={"type": "nf4", "double_quant": False})),
    ("d06_llama_qlora_dq_quantize_on_load_from_fp32", llama(512, 3, 8, 2, 1408, 8000),
     run(2, 64, "bfloat16", {"from": "float32", "cast": "host"},
         quant={"type": "nf4", "double_quant": True})),
    ("d07_llama_qlora_dq_quantize_on_load_small_vocab", llama(512, 2, 8, 2, 1408, 256),
     run(2, 64, "bfloat16", {"from": "bfloat16", "cast": "host"},
         quant={"type": "nf4", "double_quant": True})),
]


def main():
    write("cases_load.json", CASES)


if __name__ == "__main__":
    main()
