-- PyTorch eager on CUDA: the caching allocator rounds every request to 512 B
-- blocks (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize); requests over
-- 10 MiB (kLargeBuffer) get their own segment rounded to 2 MiB (kRoundLarge),
-- the lower bound of reserved memory (fragmentation is not modelled).
return {
  name = "pytorch",
  label = "PyTorch eager on CUDA",
  allocator = { round = 512, small_max = 10 << 20, large_round = 2 << 20 },
  context = 500 << 20,
  adam_step_bytes = 0, -- Adam's step counters are host tensors on CUDA
  assumptions = { "CUDA context + cuBLAS workspace ~500 MiB (assumed)" },
  libraries = { "sdpa", "deepspeed", "fsdp", "bitsandbytes", "liger" }, -- what fit --knobs may name here (stdlib/frameworks.lua)
}
