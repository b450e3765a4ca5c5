"""Writes ../cases_adapters.json: peft adapter variants (ref.LoraLinear, ref.ModulesToSave) on
small Llama decoders, measured like the other cases (the `accuracy_adapters` test):

  /usr/bin/python3 gen_adapter_cases.py
  nice /usr/bin/python3 measure.py ../cases_adapters.json ../results_adapters.json --jobs 2

DoRA (peft tuners/lora/dora.py), LoRA dropout (the cast input dropped; on CPU the dropout
keeps a noise tensor of the input's dtype, on CUDA a bool mask), rsLoRA (scaling only) and
modules_to_save (the original module kept beside a trainable copy).
"""
from gen_qlora_cases import QKVO, llama, run as qlora_run, write


def run(b, t, dtype, ckpt=False, targets=QKVO, **lora):
    r = qlora_run(b, t, 8, targets, ckpt=ckpt, dtype=dtype)
    del r["quant"]
    r["lora"].update(lora)
    return r


CFG = llama(256, 2, 4, 2, 688, 8000)
CASES = [
    ("a01_llama_dora_qkvo_bf16", CFG, run(2, 128, "bfloat16", dora=True)),
    ("a02_llama_dora_all_fp32", CFG, run(2, 96, "float32", targets="all-linear", dora=True)),
    ("a03_llama_lora_dropout_bf16", CFG, run(2, 128, "bfloat16", dropout=0.1)),
    ("a04_llama_dora_dropout_all_bf16", CFG,
     run(2, 128, "bfloat16", targets="all-linear", dora=True, dropout=0.05)),
    ("a05_llama_rslora_bf16", CFG, run(2, 128, "bfloat16", rslora=True)),
    ("a06_llama_lora_modules_to_save_head_bf16", CFG,
     run(2, 128, "bfloat16", modules_to_save=["lm_head"])),
    ("a07_llama_lora_modules_to_save_embed_fp32", CFG,
     run(2, 96, "float32", modules_to_save=["embed_tokens"])),
    ("a08_llama_dora_ckpt_bf16", llama(256, 3, 4, 2, 688, 8000),
     run(4, 128, "bfloat16", ckpt=True, dora=True)),
]


def main():
    write("cases_adapters.json", CASES)


if __name__ == "__main__":
    main()
