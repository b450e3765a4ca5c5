-- TorchSharp: .NET bindings over libtorch, so the same CUDA caching
-- allocator as PyTorch (stdlib/frameworks/pytorch.lua). Tensors are freed by
-- Dispose (or a `using` scope), not by reference count: temporaries that are
-- not disposed live until the .NET collector finalizes them.
return {
  name = "torchsharp",
  label = "TorchSharp (libtorch) on CUDA",
  allocator = require("stdlib.frameworks.pytorch").allocator, -- the same libtorch allocator
  context = 500 << 20,
  adam_step_bytes = 0,
  undisposed_temporaries = true,
  assumptions = { "libtorch CUDA context ~500 MiB (assumed)",
    "TorchSharp: temporaries freed when disposed, as Python frees them; undisposed ones "
      .. "are counted only with run.undisposed_steps" },
  libraries = { "sdpa" }, -- libtorch's scaled_dot_product_attention (stdlib/frameworks.lua)
}
