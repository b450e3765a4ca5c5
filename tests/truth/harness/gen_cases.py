"""Writes tests/truth/cases_public.json: the 25 hand-picked cases (p01-p25, kept
as they are in the file), random combinations of the feature space drawn from a
fixed seed (r001...), and cases of the families the reference models follow
beyond those (n01...: MoE, Gemma-2, mllama cross-attention, Qwen2.5-VL windowed
vision).

  /usr/bin/python3 gen_cases.py [--count 130] [--seed 13]

The same seed and count give the same file. Sizes are kept small enough that a
case measures in a few CPU seconds and stays under ~1.5 GB.
"""
import argparse
import json
import os
import random

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cases_public.json")
QKVO = ["q_proj", "k_proj", "v_proj", "o_proj"]


def decoder_cfg(rnd, model_type=None, small_vocab_ok=True):
    mt = model_type or rnd.choice(["llama", "qwen2", "qwen3"])
    hd = rnd.choice([32, 64])
    heads = rnd.choice([2, 4, 6, 8])
    kv = rnd.choice([k for k in (1, 2, heads) if heads % k == 0])
    H = rnd.choice([128, 192, 256, 384, 512])
    if rnd.random() < 0.7:  # usually head_dim * heads = hidden; sometimes not (Qwen3-style)
        heads = max(2, H // hd)
        kv = rnd.choice([k for k in (1, 2, 4, heads) if heads % k == 0])
    c = {"model_type": mt, "hidden_size": H, "num_hidden_layers": rnd.choice([1, 2, 3, 4]),
         "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
         "intermediate_size": rnd.choice([2, 3, 4]) * H + rnd.choice([0, 64]),
         "vocab_size": rnd.choice([2048, 4096, 8192, 12000, 16000, 32000] +
                                  ([1000, 3000] if small_vocab_ok else [])),
         "tie_word_embeddings": rnd.random() < 0.5, "rms_norm_eps": 1e-6, "hidden_act": "silu",
         "rope_theta": 1000000.0 if mt.startswith("qwen") else 10000.0}
    if mt == "qwen2":
        c.update(attention_bias=True, qk_norm=False)
    elif mt == "qwen3":
        c.update(attention_bias=rnd.random() < 0.2, qk_norm=True)
    else:
        c.update(attention_bias=rnd.random() < 0.2, qk_norm=False)
    return c


def vision_cfg(rnd, img=None):
    D = rnd.choice([128, 192, 256, 384])
    heads = D // 64
    patch = rnd.choice([14, 16])
    img = img or patch * rnd.choice([8, 10, 12, 14, 16])
    return {"model_type": "siglip_vision_model", "hidden_size": D,
            "num_hidden_layers": rnd.choice([1, 2, 3, 4]), "num_attention_heads": heads,
            "intermediate_size": 4 * D, "patch_size": patch, "image_size": img, "num_channels": 3,
            "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh"}


def run_cfg(rnd, family, train_frac=0.7):
    mode = rnd.choice(["fp32", "bf16", "mixed"])
    dtype = "float32" if mode == "fp32" else "bfloat16"
    train = rnd.random() < train_frac
    r = {"batch": rnd.choice([1, 2, 4]), "seq": None, "dtype": dtype,
         "precision_mode": "mixed" if mode == "mixed" else "pure", "optimizer": "none",
         "foreach": None, "lr": 1e-4, "weight_decay": None, "grad_ckpt": False, "loss_variant": "ce",
         "lora": None, "frozen": [], "generate_tokens": 0}
    if family != "vit":
        r["seq"] = rnd.choice([64, 128, 256, 384, 512])
    if train:
        opt = rnd.choice(["adamw", "adamw", "adam", "sgd", "sgd_momentum"])
        r["optimizer"] = opt
        r["foreach"] = rnd.choice([False, False, True, "torch2"])
        r["weight_decay"] = 0.01 if opt == "adamw" else rnd.choice([0.0, 0.0, 0.01])
        r["grad_ckpt"] = rnd.random() < 0.3
        if rnd.random() < 0.3:
            targets = rnd.choice([QKVO, "all-linear", ["q_proj", "v_proj"]])
            if family == "vit" and targets == QKVO:
                targets = ["q_proj", "k_proj", "v_proj", "out_proj"]
            rk = rnd.choice([4, 8, 16])
            r["lora"] = {"r": rk, "alpha": 2 * rk, "targets": targets, "dropout": 0.0}
        if family == "vlm" and not r["lora"] and rnd.random() < 0.5:
            r["frozen"] = [rnd.choice(["vision", "llm", "projector"])]
        if family == "decoder" and not r["lora"] and rnd.random() < 0.1:
            r["frozen"] = ["embeddings"]
        if family == "decoder" and rnd.random() < 0.05:
            r["loss_variant"] = "one_hot"
    elif family != "vit" and rnd.random() < 0.5:
        r["generate_tokens"] = rnd.choice([4, 8, 16])
        r["seq"] = rnd.choice([256, 512, 768, 1024])  # longer prompts
    elif family == "decoder":
        r["seq"] = rnd.choice([128, 256, 512, 1024])
    return r


def bounded(c, r, family):
    """Keeps a case within the time and memory budget."""
    if family == "vit":
        return True
    t = c if family == "decoder" else c["text_config"]
    seq = r["seq"] + (0 if family == "decoder" else
                      (c["vision_config"]["image_size"] // c["vision_config"]["patch_size"]) ** 2
                      // c["pixel_shuffle_factor"] ** 2)
    tokens = r["batch"] * seq
    logits = tokens * t["vocab_size"] * 4 * (1 if r["optimizer"] == "none" else 3)
    attn = r["batch"] * t["num_attention_heads"] * seq * seq * 4 * (1 if r["optimizer"] == "none" else
                                                                    t["num_hidden_layers"] + 2)
    return logits < 250e6 and attn < 250e6 and tokens <= 2048


def random_case(rnd, i):
    family = rnd.choices(["decoder", "vit", "vlm"], weights=[5, 2, 3])[0]
    for _ in range(100):
        if family == "decoder":
            cfg = decoder_cfg(rnd)
        elif family == "vit":
            cfg = dict(vision_cfg(rnd), num_labels=rnd.choice([10, 100, 1000]))
        else:
            v = vision_cfg(rnd, img=rnd.choice([14 * 16, 16 * 14, 16 * 16, 14 * 12]))
            f = 2 if (v["image_size"] // v["patch_size"]) % 2 == 0 and rnd.random() < 0.7 else 1
            cfg = {"vision_config": v, "text_config": decoder_cfg(rnd, small_vocab_ok=False),
                   "pixel_shuffle_factor": f, "projector_hidden_act": "gelu",
                   "multimodal_projector_bias": True, "projector": "mlp2x_gelu"}
        r = run_cfg(rnd, family)
        if bounded(cfg, r, family):
            return {"id": f"r{i:03d}_{describe(family, cfg, r)}", "family": family, "config": cfg, "run": r}
    raise RuntimeError("no case within the budget")


def describe(family, cfg, r):
    mt = cfg.get("model_type") if family == "decoder" else ("vit" if family == "vit" else "vlm")
    prec = {"float32": "fp32", "bfloat16": "bf16"}[r["dtype"]] if r["precision_mode"] == "pure" else "mixed"
    what = r["optimizer"] if r["optimizer"] != "none" else ("gen" if r["generate_tokens"] else "infer")
    extra = ("_lora" if r["lora"] else "") + ("_ckpt" if r["grad_ckpt"] else "")
    return f"{mt}_{prec}_{what}{extra}"


def new_family_cases():
    """One or more measured cases per family the reference models add."""
    def run(b, t, dtype="float32", mode="pure", opt="adamw", ckpt=False, lora=None, gen=0, frozen=None):
        return {"batch": b, "seq": t, "dtype": dtype, "precision_mode": mode, "optimizer": opt,
                "foreach": None if opt == "none" else False, "lr": 1e-4,
                "weight_decay": None if opt == "none" else (0.01 if opt == "adamw" else 0.0),
                "grad_ckpt": ckpt, "loss_variant": "ce", "lora": lora, "frozen": frozen or [],
                "generate_tokens": gen}

    base = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "vocab_size": 8192, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "rope_theta": 1000000.0, "attention_bias": False}
    mixtral = dict(base, model_type="mixtral", intermediate_size=512, num_local_experts=4,
                   num_experts_per_tok=2, tie_word_embeddings=False, qk_norm=False)
    qmoe = dict(base, model_type="qwen3_moe", intermediate_size=768, moe_intermediate_size=256,
                num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, tie_word_embeddings=True,
                qk_norm=True)
    # every layer sparse (decoder_sparse_step 1, no mlp_only_layers), q/k/v biases
    q2moe = dict(base, model_type="qwen2_moe", intermediate_size=768, moe_intermediate_size=256,
                 shared_expert_intermediate_size=512, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], qkv_bias=True,
                 tie_word_embeddings=False, qk_norm=False)
    olmoe = dict(base, model_type="olmoe", intermediate_size=256, num_experts=8,
                 num_experts_per_tok=2, norm_topk_prob=False, tie_word_embeddings=False,
                 qk_norm=False, rms_norm_eps=1e-5)
    gemma = dict(base, model_type="gemma2", intermediate_size=768, hidden_act="gelu_pytorch_tanh",
                 query_pre_attn_scalar=64, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                 sliding_window=128, tie_word_embeddings=True, qk_norm=False, rope_theta=10000.0)
    vis = {"model_type": "siglip_vision_model", "hidden_size": 192, "num_hidden_layers": 2,
           "num_attention_heads": 3, "intermediate_size": 768, "patch_size": 16, "image_size": 224,
           "num_channels": 3, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh"}
    llama = dict(base, model_type="llama", intermediate_size=768, tie_word_embeddings=False, qk_norm=False,
                 num_hidden_layers=4, cross_attention_layers=[1, 3])
    qvit = {"model_type": "qwen2_5_vl_vision", "hidden_size": 256, "depth": 4, "num_heads": 4,
            "intermediate_size": 512, "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2,
            "window_size": 112, "fullatt_block_indexes": [3], "out_hidden_size": 384, "hidden_act": "silu",
            "image_size": 448, "num_labels": 100}
    xvlm = {"vision_config": vis, "text_config": llama, "pixel_shuffle_factor": 1}
    return [
        ("n01_mixtral_fp32_adamw", "decoder", mixtral, run(2, 256)),
        ("n02_mixtral_bf16_infer", "decoder", mixtral, run(2, 512, "bfloat16", opt="none")),
        ("n03_qwen3moe_mixed_adamw_ckpt", "decoder", qmoe, run(2, 256, "bfloat16", "mixed", ckpt=True)),
        ("n04_qwen3moe_fp32_gen", "decoder", qmoe, run(2, 256, opt="none", gen=8)),
        ("n05_gemma2_fp32_adamw", "decoder", gemma, run(2, 256)),
        ("n06_gemma2_bf16_sgd_ckpt", "decoder", gemma, run(2, 256, "bfloat16", opt="sgd", ckpt=True)),
        ("n07_gemma2_mixed_infer", "decoder", gemma, run(2, 384, "bfloat16", "mixed", opt="none")),
        ("n08_mllama_xattn_fp32_adamw", "vlm", xvlm, run(2, 128)),
        ("n09_mllama_xattn_bf16_lora", "vlm", xvlm,
         run(2, 128, "bfloat16", lora={"r": 8, "alpha": 16, "targets": QKVO, "dropout": 0.0})),
        ("n10_mllama_xattn_fp32_infer", "vlm", xvlm, run(2, 128, opt="none")),
        ("n11_qwen25vl_vit_fp32_adamw", "vit", qvit, run(2, None)),
        ("n12_qwen25vl_vit_bf16_infer", "vit", qvit, run(2, None, "bfloat16", opt="none")),
        ("n13_qwen25vl_vit_mixed_ckpt", "vit", qvit, run(2, None, "bfloat16", "mixed", ckpt=True)),
        ("n14_qwen2moe_fp32_adamw", "decoder", q2moe, run(2, 256)),
        ("n15_qwen2moe_bf16_infer", "decoder", q2moe, run(2, 512, "bfloat16", opt="none")),
        ("n16_qwen2moe_bf16_lora_ckpt", "decoder", q2moe,
         run(2, 256, "bfloat16", ckpt=True, lora={"r": 8, "alpha": 16, "targets": QKVO, "dropout": 0.0})),
        ("n17_qwen2moe_fp32_gen", "decoder", q2moe, run(2, 256, opt="none", gen=8)),
        ("n18_olmoe_fp32_adamw", "decoder", olmoe, run(2, 256)),
        ("n19_olmoe_mixed_infer", "decoder", olmoe, run(2, 512, "bfloat16", "mixed", opt="none")),
        ("n20_olmoe_bf16_lora_all", "decoder", olmoe,
         run(2, 256, "bfloat16", lora={"r": 8, "alpha": 16, "targets": "all-linear", "dropout": 0.0})),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=130)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    with open(OUT) as f:
        cases = [c for c in json.load(f) if c["id"].startswith("p")]
    rnd = random.Random(a.seed)
    cases += [random_case(rnd, i + 1) for i in range(a.count)]
    cases += [{"id": i, "family": fam, "config": c, "run": r} for i, fam, c, r in new_family_cases()]
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case id"
    with open(OUT, "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
