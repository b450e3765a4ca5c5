"""Reference models for the memory measurements: plain PyTorch that follows the
Hugging Face *eager* code op for op, so that autograd saves and frees what it
saves and frees under transformers. Weights are random; only the op sequence,
shapes and dtypes matter.

What each piece follows (transformers 4.5x, the eager attention path; the
op sequences below are unchanged in 5.x unless said otherwise):

  decoder (llama, qwen2, qwen3)  models/{llama,qwen2,qwen3}/modeling_*.py,
                                 masking_utils.eager_mask, loss/loss_utils.ForCausalLMLoss
  gemma2                         models/gemma2/modeling_gemma2.py: (1 + w) RMSNorm, sqrt(d)
                                 embedding scale, sandwich norms around attention and MLP,
                                 attention and final-logit soft-capping, alternating
                                 sliding-window layers (one extra eager mask)
  mixtral, qwen3_moe             models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock and
                                 models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock
                                 (4.56: softmax in fp32, top-k, renormalise, one_hot expert
                                 mask, a loop over the experts hit, index_add_). 5.x fuses the
                                 experts into 3-D weights; not measured here.
  vit (SigLIP)                   models/siglip/modeling_siglip.py + SiglipForImageClassification
  vlm                            SigLIP -> models/idefics3 Idefics3Connector.pixel_shuffle ->
                                 models/llava LlavaMultiModalProjector -> decoder
  xattn_vlm                      models/mllama/modeling_mllama.py MllamaCrossAttentionDecoderLayer
                                 and MllamaTextCrossAttention between llama self-attention layers;
                                 SigLIP tower + mllama's one-Linear projector (no tiles, no masks)
  qwen25vl_vit                   models/qwen2_5_vl/modeling_qwen2_5_vl.py vision tower:
                                 Conv3d patch embed, 2-D vision RoPE in fp32, window_index
                                 reordering, windowed blocks (cu_window_seqlens) and full blocks,
                                 eager attention split per window, PatchMerger; mean-pooled
                                 classifier on top
  LoRA                           peft tuners/lora/layer.py Linear.forward (dropout 0)
  KV cache                       cache_utils.DynamicCache (torch.cat per layer and step)
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

IGNORE = -100


def act(name):
    return {"silu": nn.SiLU(), "gelu": nn.GELU(), "gelu_pytorch_tanh": nn.GELU(approximate="tanh"),
            "gelu_tanh": nn.GELU(approximate="tanh")}[name]


# torch 1.13 saves a mean's whole input for its backward (the RMSNorm pow(2)
# output); torch >= 2.0 saves only sizes. To measure what transformers runs on,
# the mean below keeps only the shape and allocates in backward what torch 2.x
# does (one expanded, full-size gradient).
OLD_MEAN = int(torch.__version__.split(".")[0]) < 2


class _Mean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim):
        ctx.size, ctx.dim, ctx.keep = x.shape, dim % x.dim(), keepdim
        return x.mean(dim, keepdim=keepdim)

    @staticmethod
    def backward(ctx, g):
        g = g if ctx.keep else g.unsqueeze(ctx.dim)
        return g.expand(ctx.size) / ctx.size[ctx.dim], None, None


def mean(x, dim, keepdim=False):
    if OLD_MEAN and x.requires_grad and torch.is_grad_enabled():
        return _Mean.apply(x, dim, keepdim)
    return x.mean(dim, keepdim=keepdim)


class RMSNorm(nn.Module):
    """LlamaRMSNorm; gemma=True is Gemma2RMSNorm (fp32 math, (1 + weight), type_as)."""

    def __init__(self, d, eps=1e-6, gemma=False):
        super().__init__()
        self.gemma = gemma
        self.weight = nn.Parameter(torch.zeros(d) if gemma else torch.ones(d))
        self.eps = eps

    def forward(self, x):
        if self.gemma:
            h = x.float()
            h = h * torch.rsqrt(mean(h.pow(2), -1, keepdim=True) + self.eps)
            h = h * (1.0 + self.weight.float())
            return h.type_as(x)
        dt = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(mean(h.pow(2), -1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rope(nn.Module):
    def __init__(self, dim, theta):
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    @torch.no_grad()
    def forward(self, x, pos):
        f = self.inv_freq[None, :, None].float().expand(pos.shape[0], -1, 1)
        with torch.autocast("cpu", enabled=False):
            freqs = (f.float() @ pos[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos() * 1.0, emb.sin() * 1.0
        return cos.to(x.dtype), sin.to(x.dtype)


def apply_rope(q, k, cos, sin):
    """apply_rotary_pos_emb: the un-rotated q and k stay alive until both are rotated."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(x, n):
    if n == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def eager_attention(q, k, v, mask, scaling, groups=1, softcap=None):
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    if softcap is not None:
        w = w / softcap
        w = torch.tanh(w)
        w = w * softcap
    if mask is not None:
        w = w + mask[:, :, :, : k.shape[-2]]
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    w = F.dropout(w, p=0.0, training=False)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), w


def causal_mask(b, q, kv, past, dtype, window=None):
    """masking_utils eager mask: bool (B,1,Q,KV), then where() into the model dtype."""
    qpos = torch.arange(past, past + q)
    kpos = torch.arange(kv)
    ok = kpos[None, None, None, :] <= qpos[None, None, :, None]
    if window is not None:
        ok = ok & (kpos[None, None, None, :] > qpos[None, None, :, None] - window)
    ok = ok.expand(b, 1, q, kv).contiguous()
    return torch.where(ok, torch.tensor(0.0, dtype=dtype), torch.finfo(dtype).min)


class Cache:
    """DynamicCache: per layer, torch.cat of the old and the new K/V."""

    def __init__(self):
        self.k, self.v = {}, {}

    def update(self, k, v, i):
        if i in self.k:  # the old keys are freed before the values are concatenated
            self.k[i] = torch.cat([self.k[i], k], dim=-2)
            self.v[i] = torch.cat([self.v[i], v], dim=-2)
        else:
            self.k[i], self.v[i] = k, v
        return self.k[i], self.v[i]

    def length(self):
        return 0 if not self.k else self.k[0].shape[-2]

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in list(self.k.values()) + list(self.v.values()))


def g(cfg, key, default=None):
    v = cfg.get(key)
    return default if v is None else v


def head_dim(cfg):
    return g(cfg, "head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def is_gemma(cfg):
    return cfg.get("model_type") == "gemma2"


class SelfAttention(nn.Module):
    def __init__(self, cfg, idx):
        super().__init__()
        self.idx = idx
        D, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        nkv = g(cfg, "num_key_value_heads", nh)
        self.hd = hd = head_dim(cfg)
        self.groups = nh // nkv
        mt = cfg.get("model_type", "llama")
        if mt == "qwen2":
            qkv_b, o_b = True, False
        elif mt == "qwen2_moe":  # Qwen2MoeAttention: q/k/v bias from config.qkv_bias
            qkv_b, o_b = bool(g(cfg, "qkv_bias", True)), False
        else:
            qkv_b = o_b = bool(cfg.get("attention_bias", False))
        self.q_proj = nn.Linear(D, nh * hd, bias=qkv_b)
        self.k_proj = nn.Linear(D, nkv * hd, bias=qkv_b)
        self.v_proj = nn.Linear(D, nkv * hd, bias=qkv_b)
        self.o_proj = nn.Linear(nh * hd, D, bias=o_b)
        self.qk_norm = bool(g(cfg, "qk_norm", mt in ("qwen3", "qwen3_moe")))
        # OlmoeAttention: q_norm/k_norm over the whole projection, before the head view
        self.full_qk_norm = mt == "olmoe"
        if self.full_qk_norm:
            self.qk_norm = False
            self.q_norm = RMSNorm(nh * hd, g(cfg, "rms_norm_eps", 1e-5))
            self.k_norm = RMSNorm(nkv * hd, g(cfg, "rms_norm_eps", 1e-5))
        if self.qk_norm:
            self.q_norm = RMSNorm(hd, g(cfg, "rms_norm_eps", 1e-6))
            self.k_norm = RMSNorm(hd, g(cfg, "rms_norm_eps", 1e-6))
        if is_gemma(cfg):
            self.scaling = g(cfg, "query_pre_attn_scalar", hd) ** -0.5
            self.softcap = cfg.get("attn_logit_softcapping")
        else:
            self.scaling, self.softcap = hd ** -0.5, None

    def forward(self, x, rope, mask, cache=None):
        shape = (*x.shape[:-1], -1, self.hd)
        if self.full_qk_norm:
            q = self.q_norm(self.q_proj(x)).view(shape)
            k = self.k_norm(self.k_proj(x)).view(shape)
        else:
            q, k = self.q_proj(x).view(shape), self.k_proj(x).view(shape)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rope(q, k, *rope)
        if cache is not None:
            k, v = cache.update(k, v, self.idx)
        o, w = eager_attention(q, k, v, mask, self.scaling, self.groups, self.softcap)
        return self.o_proj(o.reshape(*x.shape[:-1], -1).contiguous()), w


class GatedMLP(nn.Module):
    def __init__(self, D, I, act_name, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(D, I, bias=bias)
        self.up_proj = nn.Linear(D, I, bias=bias)
        self.down_proj = nn.Linear(I, D, bias=bias)
        self.act_fn = act(act_name)

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class MixtralExpert(nn.Module):
    """MixtralBlockSparseTop2MLP: w2(act(w1 x) * w3 x)."""

    def __init__(self, D, I, act_name):
        super().__init__()
        self.w1 = nn.Linear(D, I, bias=False)
        self.w2 = nn.Linear(I, D, bias=False)
        self.w3 = nn.Linear(D, I, bias=False)
        self.act_fn = act(act_name)

    def forward(self, x):
        return self.w2(self.act_fn(self.w1(x)) * self.w3(x))


class SparseMoe(nn.Module):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock (norm_topk_prob switch) /
    OlmoeSparseMoeBlock (Qwen3-MoE's, experts of intermediate_size) /
    Qwen2MoeSparseMoeBlock (modeling_qwen2_moe.py: a shared expert of
    shared_expert_intermediate_size, weighted by sigmoid(shared_expert_gate(x)) and
    added after the routed experts)."""

    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        mixtral = cfg["model_type"] == "mixtral"
        self.E = cfg["num_local_experts"] if mixtral else cfg["num_experts"]
        self.k = cfg["num_experts_per_tok"]
        self.renorm = True if mixtral else bool(g(cfg, "norm_topk_prob", False))
        self.gate = nn.Linear(D, self.E, bias=False)
        I = cfg["intermediate_size"] if mixtral or cfg["model_type"] == "olmoe" \
            else cfg["moe_intermediate_size"]
        a = g(cfg, "hidden_act", "silu")
        self.experts = nn.ModuleList(
            [MixtralExpert(D, I, a) if mixtral else GatedMLP(D, I, a) for _ in range(self.E)])
        self.shared_expert = None
        if cfg["model_type"] == "qwen2_moe":
            self.shared_expert = GatedMLP(D, cfg["shared_expert_intermediate_size"], a)
            self.shared_expert_gate = nn.Linear(D, 1, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        x = x.view(-1, d)
        logits = self.gate(x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, chosen = torch.topk(w, self.k, dim=-1)
        if self.renorm:
            w /= w.sum(dim=-1, keepdim=True)
        w = w.to(x.dtype)
        out = torch.zeros((b * t, d), dtype=x.dtype)
        mask = F.one_hot(chosen, num_classes=self.E).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            slot, rows = torch.where(mask[e].squeeze(0))
            y = self.experts[e](x[None, rows].reshape(-1, d)) * w[rows, slot, None]
            out.index_add_(0, rows, y.to(x.dtype))
        if self.shared_expert is not None:
            shared = self.shared_expert(x)
            shared = F.sigmoid(self.shared_expert_gate(x)) * shared
            out = out + shared
        return out.reshape(b, t, d)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, idx):
        super().__init__()
        D, eps = cfg["hidden_size"], g(cfg, "rms_norm_eps", 1e-6)
        gem = is_gemma(cfg)
        self.sandwich = gem
        self.sliding = gem and idx % 2 == 0  # Gemma2: even layers slide
        self.self_attn = SelfAttention(cfg, idx)
        if cfg.get("model_type") in ("mixtral", "qwen3_moe", "qwen2_moe", "olmoe"):
            self.mlp = SparseMoe(cfg)
        else:
            self.mlp = GatedMLP(D, cfg["intermediate_size"], g(cfg, "hidden_act", "silu"),
                                bool(cfg.get("mlp_bias", False)))
        self.input_layernorm = RMSNorm(D, eps, gem)
        self.post_attention_layernorm = RMSNorm(D, eps, gem)
        if gem:
            self.pre_feedforward_layernorm = RMSNorm(D, eps, gem)
            self.post_feedforward_layernorm = RMSNorm(D, eps, gem)

    def forward(self, h, masks, rope, cache=None):
        mask = masks[1] if self.sliding else masks[0]
        # the attention probabilities stay bound until the layer returns, as in
        # `hidden_states, _ = self.self_attn(...)`; that matters without autograd
        r = h
        h, _ = self.self_attn(self.input_layernorm(h), rope, mask, cache)
        if self.sandwich:
            h = self.post_attention_layernorm(h)
            h = r + h
            r = h
            h = self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
            return r + h
        h = r + h
        r = h
        return r + self.mlp(self.post_attention_layernorm(h))


class CrossAttention(nn.Module):
    """MllamaTextCrossAttention: q from text, k/v from the image states, q_norm/k_norm, no RoPE."""

    def __init__(self, cfg):
        super().__init__()
        D, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        nkv = g(cfg, "num_key_value_heads", nh)
        self.hd = hd = head_dim(cfg)
        self.nkv, self.groups = nkv, nh // nkv
        self.q_proj = nn.Linear(D, nh * hd, bias=False)
        self.k_proj = nn.Linear(D, nkv * hd, bias=False)
        self.v_proj = nn.Linear(D, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, D, bias=False)
        self.q_norm = RMSNorm(hd, g(cfg, "rms_norm_eps", 1e-6))
        self.k_norm = RMSNorm(hd, g(cfg, "rms_norm_eps", 1e-6))

    def forward(self, x, states):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, -1, self.hd).transpose(1, 2))
        k = self.k_proj(states).view(b, -1, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(states).view(b, -1, self.nkv, self.hd).transpose(1, 2)
        k = self.k_norm(k)
        o, w = eager_attention(q, k, v, None, self.hd ** -0.5, self.groups)
        return self.o_proj(o.reshape(b, t, -1).contiguous()), w


class CrossAttentionLayer(nn.Module):
    """MllamaCrossAttentionDecoderLayer (tanh gates; no row mask: every text row sees the image)."""

    def __init__(self, cfg):
        super().__init__()
        D, eps = cfg["hidden_size"], g(cfg, "rms_norm_eps", 1e-6)
        self.cross_attn = CrossAttention(cfg)
        self.input_layernorm = RMSNorm(D, eps)
        self.cross_attn_attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp = GatedMLP(D, cfg["intermediate_size"], g(cfg, "hidden_act", "silu"))
        self.post_attention_layernorm = RMSNorm(D, eps)
        self.cross_attn_mlp_gate = nn.Parameter(torch.zeros(1))

    def forward(self, h, states):
        r = h
        h, _ = self.cross_attn(self.input_layernorm(h), states)
        h = r + self.cross_attn_attn_gate.tanh() * h
        r = h
        h = self.mlp(self.post_attention_layernorm(h))
        return r + self.cross_attn_mlp_gate.tanh() * h


def checkpointed(fn, *args):
    return ckpt.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D = cfg["hidden_size"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], D)
        # mllama: the layers listed in cross_attention_layers are cross-attention layers
        xl = set(cfg.get("cross_attention_layers") or [])
        self.layers = nn.ModuleList([CrossAttentionLayer(cfg) if i in xl else DecoderLayer(cfg, i)
                                     for i in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(D, g(cfg, "rms_norm_eps", 1e-6), is_gemma(cfg))
        self.rotary_emb = Rope(head_dim(cfg), g(cfg, "rope_theta", 10000.0))
        self.ckpt = False

    def forward(self, ids=None, embeds=None, cache=None, cross_states=None):
        if embeds is None:
            embeds = self.embed_tokens(ids)
        b, t = embeds.shape[:2]
        past = cache.length() if cache is not None else 0
        pos = torch.arange(past, past + t).unsqueeze(0)
        masks = [causal_mask(b, t, past + t, past, embeds.dtype)]
        h = embeds
        if is_gemma(self.cfg):
            masks.append(causal_mask(b, t, past + t, past, embeds.dtype, self.cfg["sliding_window"]))
            h = h * torch.tensor(self.cfg["hidden_size"] ** 0.5, dtype=h.dtype)
        rope = self.rotary_emb(h, pos)
        train_ckpt = self.ckpt and self.training
        for layer in self.layers:
            if isinstance(layer, CrossAttentionLayer):
                if cross_states is not None:
                    h = checkpointed(layer, h, cross_states) if train_ckpt else layer(h, cross_states)
            elif train_ckpt:
                h = checkpointed(layer, h, masks, rope)
            else:
                h = layer(h, masks, rope, cache)
        return self.norm(h)


def lm_loss(logits, labels, V, variant="ce", num_items=None):
    """ForCausalLMLoss (mean); 'one_hot' is the naive -(logp * one_hot).sum(-1) form;
    'legacy_shift' transformers 4.36-4.44's shift in forward (the caller cast the logits);
    'ce_noupcast' the same loss without logits.float() (log_softmax in the logits dtype);
    'shift_float' the shift in the logits' dtype, then .float() and CrossEntropyLoss;
    num_items: the Trainer's num_items_in_batch (fixed_cross_entropy: reduction "sum",
    then divided by the count)."""
    if variant == "legacy_shift":
        shift_logits = logits[..., :-1, :].contiguous().view(-1, V)
        shift_labels = labels[..., 1:].contiguous().view(-1)
        return F.cross_entropy(shift_logits, shift_labels)
    if variant == "shift_float":  # Yxanul's src/model_fp8_optimized.py: shift, then .float()
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        shift_logits = shift_logits.float()
        return nn.CrossEntropyLoss()(shift_logits.view(-1, shift_logits.size(-1)),
                                     shift_labels.view(-1))
    if variant != "ce_noupcast":
        logits = logits.float()
    labels = F.pad(labels, (0, 1), value=IGNORE)  # the padded labels stay bound, as in HF
    shift = labels[..., 1:].contiguous().view(-1)
    logits = logits.view(-1, V)
    if variant in ("ce", "ce_noupcast"):
        if num_items is not None:
            loss = F.cross_entropy(logits, shift, ignore_index=IGNORE, reduction="sum")
            return loss / num_items
        return F.cross_entropy(logits, shift, ignore_index=IGNORE, reduction="mean")

    ok = shift != IGNORE
    safe = shift.masked_fill(~ok, 0)
    logp = F.log_softmax(logits, dim=-1)
    nll = -(logp * F.one_hot(safe, V)).sum(-1)
    return (nll * ok).sum() / ok.sum()


class CausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if g(cfg, "tie_word_embeddings", is_gemma(cfg)):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids=None, embeds=None, labels=None, cache=None, keep=0, variant="ce",
                cross_states=None, num_items=None):
        h = self.model(ids, embeds, cache, cross_states)
        if variant == "liger_fused" and labels is not None:
            return liger_causal_lm_loss(h, self.lm_head.weight, labels), None
        logits = self.lm_head(h[:, -keep:, :] if keep else h)
        cap = self.cfg.get("final_logit_softcapping")
        if cap is not None:
            logits = logits / cap
            logits = torch.tanh(logits)
            logits = logits * cap
        if variant == "legacy_shift" and labels is not None:  # logits.float() in forward
            logits = logits.float()
        loss = (lm_loss(logits, labels, self.cfg["vocab_size"], variant, num_items)
                if labels is not None else None)
        return loss, logits


# ------------------------------------------------------------------ trainers' losses
def litgpt_loss(model, ids, labels, chunk, held):
    """litgpt finetune/{lora,full}.py: logits = model(input_ids, lm_head_chunk_size=128)
    (GPT.forward: [lm_head(x_i) for x_i in x.split(chunk, dim=1)]), the last chunk sliced,
    then utils.chunked_cross_entropy on the list (reduction "none" per chunk, torch.cat,
    sum / max(1, non_masked_elems)); no upcast. The fit loop binds the list to `logits`,
    which lives through backward and the optimizer step until the next step's model call
    returns: held["logits"] plays that variable."""
    h = model.model(ids)
    logits = [model.lm_head(x_i) for x_i in h.split(chunk, dim=1)]
    del h
    held["logits"] = logits  # rebinding lets go of the previous step's list
    logits[-1] = logits[-1][..., :-1, :]
    targets = labels[..., 1:]
    logit_chunks = [c.reshape(-1, c.size(-1)) for c in logits]
    target_chunks = [t.reshape(-1) for t in targets.split(logits[0].size(1), dim=1)]
    loss_chunks = [F.cross_entropy(lc, tc, ignore_index=-1, reduction="none")
                   for lc, tc in zip(logit_chunks, target_chunks)]
    del logit_chunks, target_chunks
    non_masked = (targets != -1).sum()
    return torch.cat(loss_chunks).sum() / max(1, non_masked)


def _next_pow2(n):
    return 1 << (n - 1).bit_length()


def _ce_rows_inplace(x, t, loss_out, n_valid):
    """liger_cross_entropy_kernel on a chunk of logits rows: each row's loss into loss_out
    and its gradient, (softmax - one_hot(target)) / n_valid (0 for ignored rows), written
    over the logits. The Triton kernel holds a row in registers; here only per-row
    vectors (rows x 1) are allocated besides the chunk itself."""
    ok = t != IGNORE
    ts = t.masked_fill(~ok, 0)[:, None]
    m = torch.amax(x, dim=-1, keepdim=True)
    xt = x.gather(1, ts)
    x.sub_(m)
    x.exp_()
    s = x.sum(-1, keepdim=True)
    loss_out.copy_((s.float().log() + m.float() - xt.float()).squeeze(1) * ok / n_valid)
    x.div_(s)
    x.scatter_add_(1, ts, torch.full_like(xt, -1.0))
    x.mul_((ok.to(x.dtype) / n_valid)[:, None])


class LigerFLCE(torch.autograd.Function):
    """Liger-Kernel ops/fused_linear_cross_entropy.py (LigerFusedLinearCrossEntropyFunction,
    reduction "mean", no bias, accum_dtype None) on CPU, the branches of a CUDA sm80+ /
    torch >= 2.8 run: chunks of `chunk` rows (inc_factor = ceil(V / H), chunk =
    next_pow2(ceil(BT / inc_factor)), at most BT); grad_input (BT x H) and grad_weight
    (V x H, parameter dtype, only when the weight trains) allocated in forward and filled
    there; per chunk the logits (chunk x V, input dtype) become their own gradient in
    place, grad_input[chunk] = grad_logits @ W (a chunk x H product copied in), and
    grad_weight gets addmm(out=grad_weight) for bf16/fp16 or `+= mm(...).float()` (a
    V x H temporary) for fp32. Backward returns the saved gradients (times grad_output
    in place when it is not 1)."""

    @staticmethod
    def forward(ctx, x, w, target):
        BT, H = x.shape
        V = w.shape[0]
        inc = -(-V // H)
        chunk = min(_next_pow2(-(-BT // inc)), BT)
        grad_input = torch.zeros_like(x)
        grad_weight = torch.zeros_like(w) if w.requires_grad else None
        loss_1d = torch.zeros(BT, dtype=torch.float32)
        mask = target != IGNORE
        n_valid = mask.sum().item()
        del mask
        for s in range(0, BT, chunk):
            e = min(s + chunk, BT)
            xc = x[s:e]
            lg = xc @ w.t()
            _ce_rows_inplace(lg, target[s:e], loss_1d[s:e], n_valid)
            grad_input[s:e] = lg @ w
            if grad_weight is not None:
                if w.dtype in (torch.bfloat16, torch.float16):
                    torch.addmm(grad_weight, lg.t(), xc, out=grad_weight)
                else:
                    grad_weight += torch.mm(lg.t(), xc).float()
            del lg, xc
        loss = torch.sum(loss_1d)
        ctx.save_for_backward(grad_input, grad_weight)
        return loss

    @staticmethod
    def backward(ctx, go):
        gi, gw = ctx.saved_tensors
        if not torch.equal(go, torch.tensor(1.0)):
            gi.mul_(go)
            if gw is not None:
                gw.mul_(go)
        return gi, gw, None


def liger_causal_lm_loss(h, weight, labels):
    """liger_kernel.transformers.model.loss_utils.LigerForCausalLMLoss: labels padded and
    shifted as transformers does, hidden states flattened (a view), then the fused
    linear cross-entropy; the B x T x V logits never exist."""
    labels = F.pad(labels, (0, 1), value=IGNORE)
    shift = labels[..., 1:].contiguous().view(-1)
    return LigerFLCE.apply(h.view(-1, h.shape[-1]), weight, shift)


# ----------------------------------------------------------------------------- SigLIP
class SiglipAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        self.nh, self.hd = cfg["num_attention_heads"], D // cfg["num_attention_heads"]
        self.k_proj, self.v_proj = nn.Linear(D, D), nn.Linear(D, D)
        self.q_proj, self.out_proj = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k, v = (y.view(b, s, -1, self.hd).transpose(1, 2) for y in (q, k, v))
        o, w = eager_attention(q, k, v, None, self.hd ** -0.5)
        return self.out_proj(o.reshape(b, s, d).contiguous()), w


class SiglipMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.activation_fn = act(g(cfg, "hidden_act", "gelu_pytorch_tanh"))
        self.fc1 = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"])
        self.fc2 = nn.Linear(cfg["intermediate_size"], cfg["hidden_size"])

    def forward(self, x):
        return self.fc2(self.activation_fn(self.fc1(x)))


class SiglipLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, eps = cfg["hidden_size"], g(cfg, "layer_norm_eps", 1e-6)
        self.layer_norm1, self.layer_norm2 = nn.LayerNorm(D, eps=eps), nn.LayerNorm(D, eps=eps)
        self.self_attn, self.mlp = SiglipAttention(cfg), SiglipMLP(cfg)

    def forward(self, h):
        r = h
        h, _ = self.self_attn(self.layer_norm1(h))
        h = r + h
        r = h
        return r + self.mlp(self.layer_norm2(h))


class SiglipTower(nn.Module):
    """SiglipVisionTransformer without the attention-pool head."""

    def __init__(self, cfg):
        super().__init__()
        D, P = cfg["hidden_size"], cfg["patch_size"]
        self.n = (cfg["image_size"] // P) ** 2
        self.patch_embedding = nn.Conv2d(g(cfg, "num_channels", 3), D, P, stride=P, padding="valid")
        self.position_embedding = nn.Embedding(self.n, D)
        self.register_buffer("position_ids", torch.arange(self.n).expand((1, -1)), persistent=False)
        self.layers = nn.ModuleList([SiglipLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.post_layernorm = nn.LayerNorm(D, eps=g(cfg, "layer_norm_eps", 1e-6))
        self.ckpt = False

    def embed(self, pixels):  # SiglipVisionEmbeddings: the conv output dies on return
        x = self.patch_embedding(pixels.to(dtype=self.patch_embedding.weight.dtype))
        return x.flatten(2).transpose(1, 2) + self.position_embedding(self.position_ids)

    def forward(self, pixels):
        h = self.embed(pixels)
        for layer in self.layers:
            h = checkpointed(layer, h) if self.ckpt and self.training else layer(h)
        return self.post_layernorm(h)


# ----------------------------------------------------------------------- Qwen2.5-VL ViT
class QwenVisionAttention(nn.Module):
    def __init__(self, D, nh):
        super().__init__()
        self.nh, self.hd = nh, D // nh
        self.qkv = nn.Linear(D, 3 * D, bias=True)
        self.proj = nn.Linear(D, D)

    def forward(self, x, bounds, cos, sin):
        n = x.shape[0]
        q, k, v = self.qkv(x).reshape(n, 3, self.nh, -1).permute(1, 0, 2, 3).unbind(0)
        # apply_rotary_pos_emb_vision: the rotation runs in fp32
        qd, kd = q.dtype, k.dtype
        q, k = q.float(), k.float()
        c, s = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
        q = ((q * c) + (rotate_half(q) * s)).to(qd)
        k = ((k * c) + (rotate_half(k) * s)).to(kd)
        q, k, v = (y.transpose(0, 1).unsqueeze(0) for y in (q, k, v))
        lengths = (bounds[1:] - bounds[:-1]).tolist()
        parts = zip(*(torch.split(y, lengths, dim=2) for y in (q, k, v)))
        o = torch.cat([eager_attention(a, b, c_, None, self.hd ** -0.5)[0] for a, b, c_ in parts], dim=1)
        return self.proj(o.reshape(n, -1).contiguous())


class QwenVisionBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        self.norm1, self.norm2 = RMSNorm(D, 1e-6), RMSNorm(D, 1e-6)
        self.attn = QwenVisionAttention(D, cfg["num_heads"])
        self.mlp = GatedMLP(D, cfg["intermediate_size"], g(cfg, "hidden_act", "silu"), bias=True)

    def forward(self, h, bounds, cos, sin):
        h = h + self.attn(self.norm1(h), bounds, cos, sin)
        return h + self.mlp(self.norm2(h))


class QwenVisionTower(nn.Module):
    """Qwen2_5_VisionTransformerPretrainedModel for one image grid per sample (t = 1)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D, P, tp = cfg["hidden_size"], cfg["patch_size"], g(cfg, "temporal_patch_size", 2)
        self.m = g(cfg, "spatial_merge_size", 2)
        self.patch_embed = nn.Conv3d(3, D, (tp, P, P), stride=(tp, P, P), bias=False)
        hd = D // cfg["num_heads"]
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, hd // 2, 2, dtype=torch.float)
                                                           / (hd // 2))), persistent=False)
        self.blocks = nn.ModuleList([QwenVisionBlock(cfg) for _ in range(cfg["depth"])])
        self.ln_q = RMSNorm(D, 1e-6)
        self.merger = nn.Sequential(nn.Linear(D * self.m ** 2, D * self.m ** 2), nn.GELU(),
                                    nn.Linear(D * self.m ** 2, cfg["out_hidden_size"]))
        self.ckpt = False

    def grid(self):
        side = self.cfg["image_size"] // self.cfg["patch_size"]
        return side, side

    def rope_and_windows(self, images):
        """rot_pos_emb + get_window_index for `images` grids of side x side patches."""
        hs, ws = self.grid()
        m = self.m
        hp = torch.arange(hs).unsqueeze(1).expand(-1, ws)
        wp = torch.arange(ws).unsqueeze(0).expand(hs, -1)
        ids = [y.reshape(hs // m, m, ws // m, m).permute(0, 2, 1, 3).flatten() for y in (hp, wp)]
        ids = torch.stack(ids, dim=-1).repeat(images, 1)
        freqs = torch.outer(torch.arange(max(hs, ws)).float(), self.inv_freq)
        rot = freqs[ids].flatten(1)
        win = self.cfg["window_size"] // m // self.cfg["patch_size"]
        lh, lw = hs // m, ws // m
        index, bounds, base = [], [0], 0
        for _ in range(images):
            idx = torch.arange(lh * lw).reshape(1, lh, lw)
            ph, pw = (win - lh % win) % win, (win - lw % win) % win
            nh, nw = (lh + ph) // win, (lw + pw) // win
            idx = F.pad(idx, (0, pw, 0, ph), "constant", -100).reshape(1, nh, win, nw, win)
            idx = idx.permute(0, 1, 3, 2, 4).reshape(1, nh * nw, win, win)
            counts = (idx != -100).sum([2, 3]).reshape(-1)
            flat = idx.reshape(-1)
            index.append(flat[flat != -100] + base)
            for c in counts.tolist():
                if c:
                    bounds.append(bounds[-1] + c * m * m)
            base += lh * lw
        return rot, torch.cat(index), torch.tensor(bounds, dtype=torch.int32)

    def images(self, pixels):
        return pixels.shape[0] // self.grid()[0] ** 2

    def forward(self, pixels):
        b = self.images(pixels)
        tp, P = g(self.cfg, "temporal_patch_size", 2), self.cfg["patch_size"]
        # the processor's flattened patches: (patches, 3 * tp * P * P) per image
        x = pixels.view(-1, 3, tp, P, P).to(dtype=self.patch_embed.weight.dtype)
        h = self.patch_embed(x).view(-1, self.cfg["hidden_size"])
        rot, index, win_bounds = self.rope_and_windows(b)
        n, u = h.shape[0], self.m ** 2
        h = h.reshape(n // u, u, -1)[index].reshape(n, -1)
        rot = rot.reshape(n // u, u, -1)[index].reshape(n, -1)
        emb = torch.cat((rot, rot), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        side = self.grid()[0] ** 2
        full_bounds = torch.arange(0, (b + 1) * side, side, dtype=torch.int32)
        full = set(self.cfg.get("fullatt_block_indexes") or [])
        for i, blk in enumerate(self.blocks):
            bounds = full_bounds if i in full else win_bounds
            if self.ckpt and self.training:
                h = checkpointed(blk, h, bounds, cos, sin)
            else:
                h = blk(h, bounds, cos, sin)
        h = self.merger(self.ln_q(h).view(-1, self.cfg["hidden_size"] * u))
        return h[torch.argsort(index)]


class ImageClassifier(nn.Module):
    """SiglipForImageClassification: mean over patches + Linear + CE. With a Qwen2.5-VL
    tower the mean runs over its merged tokens."""

    def __init__(self, cfg, qwen=False):
        super().__init__()
        self.cfg, self.qwen = cfg, qwen
        if qwen:
            self.vision_model = QwenVisionTower(cfg)
            D = cfg["out_hidden_size"]
        else:
            self.vision_model = SiglipTower(cfg)
            D = cfg["hidden_size"]
        self.classifier = nn.Linear(D, g(cfg, "num_labels", 1000))

    def forward(self, pixels, labels=None):
        h = self.vision_model(pixels)
        if self.qwen:
            h = h.view(self.vision_model.images(pixels), -1, h.shape[-1])
        h = mean(h, 1)  # rebinding frees the tower output (the mean saves only sizes)
        logits = self.classifier(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.classifier.out_features), labels.view(-1),
                                   ignore_index=IGNORE)
        return loss, logits


# ----------------------------------------------------------------------------- VLMs
def pixel_shuffle(x, f):
    """Idefics3Connector.pixel_shuffle."""
    b, s, d = x.size()
    side = int(s ** 0.5)
    x = x.view(b, side, side, d).view(b, side, side // f, d * f).permute(0, 2, 1, 3)
    x = x.reshape(b, side // f, side // f, d * f * f).permute(0, 2, 1, 3)
    return x.reshape(b, s // (f * f), d * f * f)


class LlavaProjector(nn.Module):
    def __init__(self, din, dout, act_name="gelu", bias=True):
        super().__init__()
        self.linear_1 = nn.Linear(din, dout, bias=bias)
        self.act = act(act_name)
        self.linear_2 = nn.Linear(dout, dout, bias=bias)

    def forward(self, x):
        return self.linear_2(self.act(self.linear_1(x)))


class VLM(nn.Module):
    """Image tokens in front of the text (LLaVA-style), or, with
    text_config.cross_attention_layers, image states read by mllama cross-attention."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        v, t = cfg["vision_config"], cfg["text_config"]
        self.xattn = bool(t.get("cross_attention_layers"))
        self.f = int(g(cfg, "pixel_shuffle_factor", 1))
        self.vision_tower = SiglipTower(v)
        din = v["hidden_size"] * self.f ** 2
        if self.xattn:  # MllamaForConditionalGeneration.multi_modal_projector
            self.multi_modal_projector = nn.Linear(din, t["hidden_size"], bias=True)
        else:
            self.multi_modal_projector = LlavaProjector(
                din, t["hidden_size"], g(cfg, "projector_hidden_act", "gelu"),
                g(cfg, "multimodal_projector_bias", True))
        self.language_model = CausalLM(t)

    def image_tokens(self):
        v = self.cfg["vision_config"]
        return (v["image_size"] // v["patch_size"]) ** 2 // self.f ** 2

    def image_features(self, pixels):
        h = self.vision_tower(pixels)
        if self.f > 1:
            h = pixel_shuffle(h, self.f)
        return self.multi_modal_projector(h)

    def forward(self, ids, pixels, labels=None, variant="ce"):
        lm = self.language_model
        if self.xattn:
            states = self.image_features(pixels)
            return lm(ids=ids, labels=labels, variant=variant, cross_states=states)
        emb = lm.model.embed_tokens(ids)
        img = self.image_features(pixels).to(emb.dtype)
        emb = torch.cat([img, emb], dim=1)
        if labels is not None:
            img_labels = torch.full((labels.shape[0], img.shape[1]), IGNORE, dtype=labels.dtype)
            labels = torch.cat([img_labels, labels], dim=1)
        return lm(embeds=emb, labels=labels, variant=variant)


# ----------------------------------------------------------------------------- LoRA
class LoraLinear(nn.Module):
    """peft lora.Linear, one adapter. Adapters stay fp32 for bf16 bases
    (autocast_adapter_dtype=True): the input is cast to fp32, the sum cast back.
    dropout > 0: nn.Dropout on the cast input (peft's lora_dropout). rslora: scaling
    alpha / sqrt(r) (use_rslora; the same tensors). dora: peft tuners/lora/dora.py
    DoraLinearLayer (0.11-0.12: the base product recomputed as F.linear(x, W.to(x.dtype)),
    lora_weight from lora_B(lora_A(eye)), the weight norm detached), its magnitude an fp32
    vector of out_features."""

    def __init__(self, base, r, alpha, dropout=0.0, rslora=False, dora=False):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / math.sqrt(r) if rslora else alpha / r
        self.lora_dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.dora = dora
        if dora:  # DoraLinearLayer._update_layer: ||W + s * B @ A|| per row (B = 0 at init)
            w = base.weight.detach().float()
            self.lora_magnitude_vector = nn.Parameter(torch.linalg.norm(w, dim=1))

    def forward(self, x):
        y = self.base_layer(x)
        dt = y.dtype
        if x.dtype != self.lora_A.weight.dtype:
            x = x.to(dtype=self.lora_A.weight.dtype)
        if self.dora:
            x = self.lora_dropout(x)
            y = y + self._dora(x)
        else:
            y = y + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        return y.to(dt)

    def _dora(self, x):
        lora_result = self.lora_B(self.lora_A(x))
        x_eye = torch.eye(self.lora_A.weight.shape[1], dtype=x.dtype)
        lora_weight = self.lora_B(self.lora_A(x_eye)).T
        magnitude = self.lora_magnitude_vector
        weight = self.base_layer.weight.to(x.dtype)
        w = weight + self.scaling * lora_weight.detach()
        weight_norm = torch.linalg.norm(w, dim=1).to(w.dtype)
        del w
        weight_norm = weight_norm.detach()
        mag_norm_scale = (magnitude / weight_norm).view(1, -1)
        return (mag_norm_scale - 1) * (F.linear(x, weight)) + mag_norm_scale * lora_result * self.scaling


HEADS = ("lm_head", "classifier")


def add_lora(model, r, alpha, targets, **variant):
    """peft target matching by leaf name; 'all-linear' = every Linear but the output head.
    Freezes every base parameter. variant: dropout, rslora, dora (LoraLinear)."""
    for p in model.parameters():
        p.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and n.split(".")[-1] not in HEADS and (targets == "all-linear" or n.split(".")[-1] in targets)]
    for n in names:
        parent, _, leaf = n.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, leaf, LoraLinear(getattr(owner, leaf), r, alpha, **variant))
    return names


class ModulesToSave(nn.Module):
    """peft's ModulesToSaveWrapper: the original module kept (frozen) beside a trainable
    deep copy, which the forward uses."""

    def __init__(self, module):
        super().__init__()
        self.original_module = module
        self.modules_to_save = copy.deepcopy(module)
        self.modules_to_save.requires_grad_(True)

    def forward(self, *args):
        return self.modules_to_save(*args)


def modules_to_save(model, leaf):
    """Wraps the module named `leaf` (peft modules_to_save)."""
    name = next(n for n, _ in model.named_modules() if n.split(".")[-1] == leaf)
    parent, _, child = name.rpartition(".")
    owner = model.get_submodule(parent) if parent else model
    setattr(owner, child, ModulesToSave(getattr(owner, child)))


def freeze(model, parts):
    lm = model.language_model if isinstance(model, VLM) else model
    pick = {"vision": lambda: model.vision_tower if isinstance(model, VLM) else model.vision_model,
            "projector": lambda: model.multi_modal_projector,
            "llm": lambda: lm,
            "embeddings": lambda: lm.model.embed_tokens,
            "classifier": lambda: model.classifier}
    for part in parts:
        for p in pick[part]().parameters():
            p.requires_grad_(False)


def enable_checkpointing(model):
    for m in model.modules():
        if hasattr(m, "ckpt"):
            m.ckpt = True


def build(family, cfg):
    if family == "decoder":
        return CausalLM(cfg)
    if family == "vit":
        return ImageClassifier(cfg, qwen=cfg.get("model_type") == "qwen2_5_vl_vision")
    if family == "vlm":
        return VLM(cfg)
    raise ValueError(f"unknown family {family!r}")
