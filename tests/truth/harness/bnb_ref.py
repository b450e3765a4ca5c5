"""QLoRA as bitsandbytes and peft run it, on CPU, for the truth harness.

Sources (bitsandbytes 0.4x, peft 0.1x):
  bitsandbytes/nn/modules.py  Linear4bit.forward: x.to(compute_dtype), bias.to(compute_dtype),
                              bnb.matmul_4bit(x, weight.t(), bias, quant_state).to(inp_dtype)
  bitsandbytes/autograd/_functions.py  MatMul4Bit:
      forward:  output = F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)
                ctx.tensors = (A, B) if any(ctx.needs_input_grad[:2]) else (None, None)
      backward: grad_A = torch.matmul(grad_output,
                                      F.dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())
  bitsandbytes/functional.py  quantize_4bit / dequantize_4bit: blocks of 64, an fp32 absmax
      per block; with compress_statistics (double quantisation) the absmax is stored as uint8
      codes in blocks of 256 with an fp32 absmax per block and an fp32 offset, and
      dequantize_4bit first rebuilds the fp32 absmax (a temporary, n/64 values) before the
      output. The packed weight is a uint8 Params4bit of n/2 bytes; the kernel writes the
      dequantized weight straight into one new tensor.
  peft/tuners/lora/bnb.py  Linear4bit.forward: result = base_layer(x); result = result.clone()
      ("defensively clone"); without autocast x is cast to lora_A's dtype, output =
      lora_B(lora_A(x)) * scaling, output.to(result dtype), result = result + output.

The dequantisation arithmetic runs in numpy (untracked by torch's allocator) and is
copied into one torch tensor of the compute dtype, so the tracked bytes are those of
the CUDA kernel: its output (and, with double quantisation, the fp32 absmax it rebuilds).
quant_state.absmax is a plain attribute in bitsandbytes; here it is a buffer so that the
baseline enumeration finds it (the bytes are the same). The 16-entry nf4 code table of
each quant_state (64 B) is not emulated. lm_head and the classifier stay unquantized
(transformers' default: the output layer is kept in the model dtype).
"""
import numpy as np
import torch
from torch import nn

import ref

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
BLOCK, BLOCK2 = 64, 256
HEADS = ("lm_head", "classifier")


def _quantize(w):
    """(packed uint8 n/2, absmax fp32 n/64) of a weight, as numpy arrays."""
    w = w.detach().reshape(-1)
    if w.dtype == torch.bfloat16:  # the bits widened in numpy: no tracked fp32 copy
        v = (w.view(torch.int16).numpy().astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        v = w.numpy().astype(np.float32, copy=False)
    n = v.size
    pad = (-n) % BLOCK
    vb = np.concatenate([v, np.zeros(pad, np.float32)]).reshape(-1, BLOCK)
    absmax = np.abs(vb).max(axis=1)
    scaled = vb / np.where(absmax == 0, 1, absmax)[:, None]
    codes = np.abs(scaled.reshape(-1)[:n, None] - NF4[None, :]).argmin(axis=1).astype(np.uint8)
    if n % 2:
        codes = np.concatenate([codes, np.zeros(1, np.uint8)])
    packed = (codes[0::2] << 4) | codes[1::2]
    return packed, absmax.astype(np.float32)


class Linear4bit(nn.Module):
    def __init__(self, lin, double_quant):
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        self.compute_dtype = lin.weight.dtype
        packed, absmax = _quantize(lin.weight)
        self.weight = nn.Parameter(torch.from_numpy(packed).clone().reshape(-1, 1),
                                   requires_grad=False)
        self.double_quant = double_quant
        if double_quant:
            offset = float(absmax.mean())
            centred = absmax - offset
            pad = (-centred.size) % BLOCK2
            cb = np.concatenate([centred, np.zeros(pad, np.float32)]).reshape(-1, BLOCK2)
            a2 = np.abs(cb).max(axis=1)
            q = np.round(cb / np.where(a2 == 0, 1, a2)[:, None] * 127).astype(np.int8)
            self.register_buffer("absmax", torch.from_numpy(q.reshape(-1)[:centred.size].view(
                np.uint8)).clone(), persistent=False)
            self.register_buffer("absmax2", torch.from_numpy(a2.astype(np.float32)).clone(),
                                 persistent=False)
            self.register_buffer("offset", torch.tensor(offset, dtype=torch.float32),
                                 persistent=False)
        else:
            self.register_buffer("absmax", torch.from_numpy(absmax).clone(), persistent=False)
        self.bias = lin.bias

    def dequantize(self, dtype):
        """F.dequantize_4bit(...).to(dtype): one new tensor (out, in) of `dtype`."""
        n = self.in_features * self.out_features
        tmp = None
        if self.double_quant:
            # dequantize_blockwise(absmax, state2) + offset: an fp32 temporary
            tmp = torch.empty(self.absmax.numel(), dtype=torch.float32)
            q = self.absmax.numpy().view(np.int8).astype(np.float32) / 127
            a2 = np.repeat(self.absmax2.numpy(), BLOCK2)[:q.size]
            tmp.copy_(torch.from_numpy(q * a2 + float(self.offset)))
            absmax = tmp.numpy()
        else:
            absmax = self.absmax.numpy()
        out = torch.empty(self.out_features, self.in_features, dtype=dtype)
        p = self.weight.numpy().reshape(-1)
        codes = np.empty(p.size * 2, np.uint8)
        codes[0::2], codes[1::2] = p >> 4, p & 15
        vals = NF4[codes[:n]] * np.repeat(absmax, BLOCK)[:n]
        out.copy_(torch.from_numpy(vals.reshape(self.out_features, self.in_features)))
        del tmp
        return out

    def forward(self, x):
        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        return MatMul4Bit.apply(x, self.weight, bias, self).to(inp_dtype)


class MatMul4Bit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B, bias, mod):
        output = torch.nn.functional.linear(A, mod.dequantize(A.dtype), bias)
        ctx.mod = mod
        ctx.save_for_backward(A if ctx.needs_input_grad[0] or ctx.needs_input_grad[1] else None)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (A,) = ctx.saved_tensors
        grad_A = grad_bias = None
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        if ctx.needs_input_grad[0]:
            grad_A = torch.matmul(grad_output, ctx.mod.dequantize(grad_output.dtype))
        return grad_A, None, grad_bias, None


class LoraLinear4bit(ref.LoraLinear):
    """peft lora.bnb.Linear4bit, one adapter, dropout 0, fp32 adapters."""

    def forward(self, x):
        result = self.base_layer(x)
        result = result.clone()
        requires_conversion = not torch.is_autocast_enabled()
        if requires_conversion:
            expected_dtype = result.dtype
            x = x.to(self.lora_A.weight.dtype)
        output = self.lora_B(self.lora_A(x)) * self.scaling
        if requires_conversion:
            output = output.to(expected_dtype)
        return result + output


def quantize_on_load(w, bias, double_quant):
    """transformers + bitsandbytes loading a checkpoint weight into a Linear4bit
    (Params4bit._quantize): the weight, already in the compute dtype, copied to the device
    whole (`w`, the caller's), then quantize_4bit: the packed output and an fp32 absmax per
    block; with double quantisation that absmax and its centred copy (absmax - mean) are
    fp32 temporaries while quantize_blockwise writes the uint8 codes and their fp32 absmax
    (the numpy arithmetic is untracked; these tensors stand for the kernel's buffers)."""
    lin = type("Lin", (), {})()
    lin.in_features, lin.out_features = w.shape[1], w.shape[0]
    lin.weight, lin.bias = w, bias
    tmp = []
    if double_quant:
        nb = -(-w.numel() // BLOCK)
        tmp = [torch.empty(nb, dtype=torch.float32), torch.empty(nb, dtype=torch.float32)]
    q = Linear4bit(lin, double_quant)
    del tmp
    return q


def qlora(model, quant, lora, quantized=False):
    """Every nn.Linear but the heads becomes a frozen Linear4bit (nf4, double quantisation
    when quant["double_quant"]) unless `quantized` (probe.load_model did it while loading);
    then peft's adapters on the targets. Returns the wrapped names."""
    dq = bool(quant.get("double_quant"))
    for p in model.parameters():
        p.requires_grad_(False)
    kind = Linear4bit if quantized else nn.Linear
    linears = [n for n, m in model.named_modules()
               if isinstance(m, kind) and n.split(".")[-1] not in HEADS]
    for n in linears if not quantized else []:
        parent, _, leaf = n.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, leaf, Linear4bit(getattr(owner, leaf), dq))
    if quant.get("prepare"):
        # peft prepare_model_for_kbit_training: "cast all non INT8 parameters to fp32"
        # (embeddings, norms, the head, biases; the packed weights are uint8). The
        # Linear4bit layers keep computing in the dtype they were built with and cast
        # their output back to the (now fp32) input's dtype.
        for p in model.parameters():
            if p.dtype in (torch.float16, torch.bfloat16):
                p.data = p.data.to(torch.float32)
    targets = (lora or {}).get("targets") or ["q_proj", "k_proj", "v_proj", "o_proj"]
    wrapped = []
    if lora:
        r, alpha = int(lora["r"]), float(lora.get("alpha") or 2 * lora["r"])
        for n in linears:
            if targets == "all-linear" or n.split(".")[-1] in targets:
                parent, _, leaf = n.rpartition(".")
                owner = model.get_submodule(parent) if parent else model
                setattr(owner, leaf, LoraLinear4bit(getattr(owner, leaf), r, alpha))
                wrapped.append(n)
    return wrapped
