-- PyTorch on CUDA with NVIDIA TransformerEngine's te.Linear under
-- te.fp8_autocast (DelayedScaling recipe). Sources: NVIDIA/TransformerEngine
-- transformer_engine/pytorch/module/linear.py (_Linear forward: the input is
-- quantized row-wise for the GEMM and column-wise for the weight gradient,
-- and only the column-wise copy is saved; the weight is quantized row-wise
-- and column-wise (its transpose, for dgrad) every forward unless
-- is_first_microbatch caches it, and the copy is saved for backward;
-- backward quantizes grad_output both ways), common/recipe/__init__.py
-- (DelayedScaling.amax_history_len default 1024) and quantization.py
-- (DelayedScalingRecipeState: fp32 scale[n] and amax_history[len, n], n = 3
-- forward (input, weight, output) and 2 backward (grad_output, grad_input)
-- per GEMM). Everything that is not a te.Linear (embeddings, norms,
-- attention, an nn.Linear head, the loss) stays in the model's dtype.
-- Transposes are those of Hopper and Ada FP8 GEMMs (Blackwell needs none).
local pytorch = require("stdlib.frameworks.pytorch")
return {
  name = "te-fp8",
  label = "PyTorch + TransformerEngine FP8 (te.Linear, DelayedScaling) on CUDA",
  device = "cuda",
  allocator = pytorch.allocator,
  context = pytorch.context,
  adam_step_bytes = 0,
  -- what layers.lua's te.Linear reads; run.fp8.amax_history_len overrides
  fp8_linear = { amax_history_len = 1024, fwd_tensors = 3, bwd_tensors = 2 },
  assumptions = {
    "CUDA context + cuBLAS workspace ~500 MiB (assumed; TE's own cuBLAS workspace, "
      .. "32 MiB on Hopper and 4 MiB before, is inside it)",
    "TransformerEngine FP8: each te.Linear keeps fp8 inputs (column-wise) and an fp8 weight "
      .. "copy with its transpose for backward, and fp32 amax history + scales; "
      .. "norms, attention, embeddings and an nn.Linear head stay in the model dtype",
  },
  libraries = { "sdpa", "deepspeed", "fsdp", "bitsandbytes", "liger" }, -- what fit --knobs may name here (stdlib/frameworks.lua)
}
