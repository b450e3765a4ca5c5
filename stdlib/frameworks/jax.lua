-- JAX/XLA on a GPU: XLA counts exact buffer bytes and, by default, takes 75 %
-- of the device at start-up (XLA_PYTHON_CLIENT_PREALLOCATE=true,
-- XLA_PYTHON_CLIENT_MEM_FRACTION=.75; docs: jax.readthedocs.io, "GPU memory
-- allocation"); the step allocates from that pool.
return {
  name = "jax",
  label = "JAX/XLA on a GPU",
  prealloc = 0.75,
  adam_step_bytes = 0,
  assumptions = { "XLA preallocates 75% of device memory at start-up" },
}
