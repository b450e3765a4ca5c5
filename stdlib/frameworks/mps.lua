-- PyTorch on Apple silicon (MPS). Sources: pytorch/pytorch
-- aten/src/ATen/mps/MPSAllocator.h and MPSAllocator.mm (MPSHeapAllocatorImpl):
--  * no CUDA context; the GPU allocates from unified memory shared with the
--    OS and every other process, and Metal keeps at most
--    device.recommendedMaxWorkingSetSize resident ("typically 75% of the
--    total system memory", MPSAllocator.h max_device_size). Measured values
--    vary by machine and macOS: 10.67 GiB of 16 GB on an M4
--    (exo-explore/exo#1672), 17.76 GiB of 24 GB (sgl-project/sglang#29949),
--    107.52 GiB of 128 GB on an M5 Max (antirez/ds4#893); 75 % is assumed
--    and printed.
--  * PYTORCH_MPS_HIGH_WATERMARK_RATIO (default 1.7, at most 2.0) times the
--    working set is the hard limit at which the allocator raises "MPS
--    backend out of memory"; between the working set and that limit Metal
--    pages, so the verdict here is against the working set.
--  * buffers are sized by Metal's heapBufferSizeAndAlignWithLength (device
--    specific; the 16 KiB page of Apple silicon is assumed); requests of
--    kXLargeHeap / 2 = 512 MiB or more get a heap of their own rounded to
--    kRoundLarge = 2 MiB, smaller ones share 8 MiB, 32 MiB or 1 GiB heaps.
local MiB = 1 << 20
return {
  name = "mps",
  label = "PyTorch on Apple silicon (MPS, unified memory)",
  device = "mps",
  allocator = { round = 16 << 10, small_max = 512 * MiB, large_round = 2 * MiB },
  context = 0,
  adam_step_bytes = 0, -- Adam's step counters stay CPU tensors off CUDA too
  working_set = 0.75,
  high_watermark_ratio = 1.7,
  assumptions = {
    "MPS: no CUDA context; the step must fit Metal's recommendedMaxWorkingSetSize, "
      .. "assumed 75% of unified memory (PyTorch MPSAllocator.h; measured 67-84% by machine)",
    "MPS: unified memory is shared with the OS, the Python process and the data loader "
      .. "(host tensors count against the same RAM; not modelled)",
    "MPS: buffers rounded to 16 KiB (Metal heap alignment, assumed); "
      .. "PYTORCH_MPS_HIGH_WATERMARK_RATIO 1.7 x the working set is the hard OOM limit",
  },
  libraries = { "sdpa" }, -- libtorch's scaled_dot_product_attention (stdlib/frameworks.lua)
}
