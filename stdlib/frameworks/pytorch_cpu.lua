-- PyTorch eager on the CPU: what tests/truth measures. The allocator counts
-- exact bytes; the CPU kernels keep buffers of their own (stdlib/layers.lua).
return {
  name = "pytorch-cpu",
  label = "PyTorch eager on the CPU",
  cpu_kernels = true,
  context = 0,
  adam_step_bytes = 4, -- Adam's step counters are fp32 tensors on the device
  assumptions = { "CPU: no device context" },
  libraries = { "sdpa" }, -- libtorch's scaled_dot_product_attention (stdlib/frameworks.lua)
}
