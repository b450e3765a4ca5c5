-- Optimizers: the state they keep (exact bytes from the runtime) and the
-- temporaries their step allocates (PyTorch's single-tensor and foreach
-- implementations).
local vram = require("vram")
local O = {}

O.names = { "none", "sgd", "sgd_momentum", "momentum", "adam", "adamw", "adam8bit",
  "adafactor", "lion" }

-- Allocates the state of every trainable parameter (what step 1 created).
-- opt = {name, state_dtype, foreach, step_tensors (bytes per param, CPU: 4)}
function O.init_state(S, params, opt)
  local name = opt.name
  if name == "none" or name == "sgd" then return end
  local known = {} -- dtype -> rows -> cols -> bytes: layers repeat their shapes
  for _, p in ipairs(params) do
    local state_dt = opt.state_dtype or p.dt
    local rows = p.rows or p.n
    local cols = p.n // rows
    local by_rows = known[state_dt] or {}
    known[state_dt] = by_rows
    local by_cols = by_rows[rows] or {}
    by_rows[rows] = by_cols
    -- Adam-like states are two tensors per parameter, each its own block
    local parts = (name == "adam" or name == "adam8bit" or name == "adamw") and 2 or 1
    local block = by_cols[cols] -- one state tensor as the allocator hands it out, or false
    if block == nil then
      local b = vram.optimizer_state(name == "sgd_momentum" and "momentum" or name, rows, cols,
        state_dt, opt.momentum_dtype)
      block = b > 0 and S:round_bytes(b // parts)
      by_cols[cols] = block
    end
    -- bitsandbytes' paged optimizers (get_state_buffer): the state tensors
    -- of a parameter of >= 1e5 elements come from cudaMallocManaged, outside
    -- torch's allocator (not in max_memory_allocated; resident until memory
    -- runs short); the 8-bit absmax vectors stay ordinary tensors
    local paged = opt.paged and p.n >= 100000 and block
    if paged then
      local each = S:bytes(name == "adam8bit" and "int8" or state_dt, p.n)
      S.paged_state_bytes = (S.paged_state_bytes or 0) + parts * each
      local rest = block - S:round_bytes(each)
      for _ = 1, parts do
        if rest > 0 then S.tape:alloc(rest, "optimizer_state", "optimizer.absmax") end
      end
    elseif block then
      for _ = 1, parts do S.tape:alloc(block, "optimizer_state", "optimizer.state") end
    end
    if (name == "adam" or name == "adamw") and (opt.step_bytes or 0) > 0 then
      S.tape:alloc(S:round_bytes(opt.step_bytes), "optimizer_state", "optimizer.step_count")
    end
  end
  -- TorchSharp without Dispose (run.undisposed_steps = k): the sqrt and
  -- denom temporaries of the k - 1 steps before this one are still waiting
  -- for the .NET collector, under the whole step
  local k = opt.undisposed_steps
  if k and k > 1 and (name == "adam" or name == "adamw") then
    local held = 0
    for _, p in ipairs(params) do held = held + 2 * p.b end
    S.tape:alloc(vram.mul(k - 1, held), "temporaries", "optimizer.undisposed_earlier_steps")
  end
end

local function total(params)
  local s = 0
  for _, p in ipairs(params) do s = s + p.b end
  return s
end

-- optimizer.step(): only the transients; states are updated in place.
function O.step(S, params, opt)
  -- a jitted step fuses the update into the writes of the new state
  if S.jit and S.jit.fused_optimizer then return end
  local name, fe = opt.name, opt.foreach
  local wd = opt.weight_decay or 0
  local tape = S.tape
  if name == "adam" or name == "adamw" then
    local coupled_wd = name == "adam" and wd ~= 0
    if fe == "torch2" then
      -- torch >= 2.1 _multi_tensor_adam: eps added in place, one list; the
      -- grad + wd * param list is deleted (`del device_grads`) before it
      local g = coupled_wd and tape:alloc(total(params), "temporaries", "optimizer.grad_wd")
      if g then tape:drop(g) end
      local sq = tape:alloc(total(params), "temporaries", "optimizer.sqrt")
      tape:drop(sq)
    elseif fe or opt.undisposed_steps then
      -- torch 1.13 foreach: sqrt list, then denom list; TorchSharp's
      -- single-tensor Adam without Dispose leaves every parameter's alike
      local g = coupled_wd and tape:alloc(total(params), "temporaries", "optimizer.grad_wd")
      local sq = tape:alloc(total(params), "temporaries", "optimizer.sqrt")
      local denom = tape:alloc(total(params), "temporaries", "optimizer.denom")
      tape:drop(sq, denom)
      if g then tape:drop(g) end
    else
      -- single tensor: denom = (sqrt(v) / bc).add_(eps); the previous
      -- parameter's denom lives until the name is rebound
      local prev, prev_g
      for _, p in ipairs(params) do
        local g = coupled_wd and tape:alloc(p.b, "temporaries", "optimizer.grad_wd")
        if prev_g then tape:drop(prev_g) end
        prev_g = g
        local sq = tape:alloc(p.b, "temporaries", "optimizer.sqrt")
        local denom = tape:alloc(p.b, "temporaries", "optimizer.denom")
        tape:drop(sq)
        if prev then tape:drop(prev) end
        prev = denom
      end
      if prev then tape:drop(prev) end
      if prev_g then tape:drop(prev_g) end
    end
  elseif name == "sgd" or name == "sgd_momentum" or name == "momentum" then
    -- weight decay makes grad + wd * param a new tensor (torch.optim.SGD):
    -- foreach, a list for every parameter (freed once the update is done or
    -- the momentum buffers take its place); one parameter at a time otherwise
    if wd ~= 0 and #params > 0 then
      local big = 0
      for _, p in ipairs(params) do if p.b > big then big = p.b end end
      tape:temp(fe and total(params) or big, "temporaries", "optimizer.grad_wd")
    end
  elseif name == "adafactor" or name == "lion" then
    -- one update-sized temporary per parameter
    local big = 0
    for _, p in ipairs(params) do if p.b > big then big = p.b end end
    if big > 0 then tape:temp(big, "temporaries", "optimizer.update") end
  elseif name == "adam8bit" then
    local big = 0
    for _, p in ipairs(params) do if p.b > big then big = p.b end end
    if big > 0 then tape:temp(big, "temporaries", "optimizer.dequant") end
  end
end

return O
