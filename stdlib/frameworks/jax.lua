-- JAX/XLA on a GPU: the step is one jitted XLA program, not eager ops.
--
-- Pool. JAX takes XLA_PYTHON_CLIENT_MEM_FRACTION (default .75) of the
-- device's TOTAL memory at start-up when XLA_PYTHON_CLIENT_PREALLOCATE is
-- true (the default) (docs.jax.dev, "GPU memory allocation"; newer releases
-- also read XLA_CLIENT_MEM_FRACTION). The fraction caps the BFC allocator
-- either way: xla/pjrt/gpu/gpu_helpers.cc builds it with
-- allocator_memory = total_memory * memory_fraction and only
-- allow_growth = !preallocate, so PREALLOCATE=false changes what
-- nvidia-smi shows, not what the step may use.
--
-- Allocator. The BFC allocator hands out chunks that are multiples of
-- kMinAllocationSize = 256 B (xla/tsl/framework/bfc_allocator.h,
-- kMinAllocationBits = 8); there are no 2 MiB segments as in CUDA's caching
-- allocator. Rounding is applied per simulated tensor; XLA's temporaries
-- are really one buffer of the program's heap-simulated size, so this is a
-- close upper bound.
--
-- The jitted program (`jit`, read by stdlib/step.lua, loss.lua, optim.lua,
-- xla.lua; every rule is printed as an assumption):
--   fused_loss       elementwise chains fuse into their reductions: a
--                    log_softmax multiplied by a one_hot and summed (or
--                    gathered with take_along_axis, or softmax cross
--                    entropy) never materialises a B x T x V one_hot,
--                    product or log_softmax; the logits stay as the
--                    backward's residual and the backward writes one
--                    B x T x V gradient of them
--   fused_optimizer  the optimizer's update is elementwise and fuses into
--                    the writes of the new parameters and states: no
--                    parameter-sized temporaries
--   donate           default false (jax.jit without donate_argnums): the
--                    program's outputs (new parameters and optimizer state)
--                    are buffers of their own while the arguments (the old
--                    ones) are still held by the caller, so both coexist;
--                    with donation the outputs alias the arguments
return {
  name = "jax",
  label = "JAX/XLA on a GPU",
  allocator = { round = 256, small_max = 0, large_round = 256 },
  prealloc = 0.75,
  env = { fraction = "XLA_PYTHON_CLIENT_MEM_FRACTION", preallocate = "XLA_PYTHON_CLIENT_PREALLOCATE" },
  adam_step_bytes = 0, -- optax's count: one int32 scalar, below the 256 B rounding noise
  jit = { fused_loss = true, fused_optimizer = true, donate = false },
  assumptions = {
    "XLA preallocates 75% of device memory at start-up (XLA_PYTHON_CLIENT_MEM_FRACTION=.75)",
    "BFC allocator: every buffer a multiple of 256 B",
    "jitted step: the loss's elementwise chain (log_softmax x one_hot / take_along_axis) "
      .. "fuses into its reductions; the logits and one B x T x V gradient of them are kept",
    "jitted step: the optimizer update fuses into the writes of the new state",
    "jitted step: buffers live in the simulator's op order (XLA's scheduler may reorder them; "
      .. "its temporaries share one heap-simulated allocation)",
  },
  -- printed when the run recomputes (stdlib/report.lua)
  remat = "grad_checkpointing = jax.checkpoint(policy=nothing_saveable) around each "
    .. "checkpointed decoder layer; other policies (dots_saveable, save_only_these_names) "
    .. "are not modelled",
  libraries = {}, -- what fit --knobs may name here (stdlib/frameworks.lua)
}
