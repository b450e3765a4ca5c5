-- Optimizers: the state they keep (exact bytes from the runtime) and the
-- temporaries their step allocates (PyTorch's single-tensor and foreach
-- implementations).
local vram = require("vram")
local Sim = require("stdlib.sim")
local O = {}

O.names = { "none", "sgd", "sgd_momentum", "momentum", "adam", "adamw", "adam8bit",
  "adafactor", "lion" }

-- Allocates the state of every trainable parameter (what step 1 created).
-- opt = {name, state_dtype, foreach, step_tensors (bytes per param, CPU: 4)}
function O.init_state(S, params, opt)
  local name = opt.name
  if name == "none" or name == "sgd" then return end
  local known = {} -- dtype -> rows -> cols -> bytes: layers repeat their shapes
  -- Adam-like states are two tensors per parameter, each its own block
  local parts = (name == "adam" or name == "adam8bit" or name == "adamw") and 2 or 1
  local kind = name == "sgd_momentum" and "momentum" or name
  local step_bytes = (name == "adam" or name == "adamw") and (opt.step_bytes or 0) > 0
    and S:round_bytes(opt.step_bytes)
  local tape = S.tape
  local function one(p)
    local state_dt = opt.state_dtype or p.dt
    local n = p.n
    local rows = p.rows or n
    local cols = n // rows
    local by_rows = known[state_dt]
    if not by_rows then
      by_rows = {}
      known[state_dt] = by_rows
    end
    local by_cols = by_rows[rows]
    if not by_cols then
      by_cols = {}
      by_rows[rows] = by_cols
    end
    local block = by_cols[cols] -- one state tensor as the allocator hands it out, or false
    if block == nil then
      local b = vram.optimizer_state(kind, rows, cols, state_dt, opt.momentum_dtype)
      block = b > 0 and S:round_bytes(b // parts)
      by_cols[cols] = block
    end
    -- bitsandbytes' paged optimizers (get_state_buffer): the state tensors
    -- of a parameter of >= 1e5 elements come from cudaMallocManaged, outside
    -- torch's allocator (not in max_memory_allocated; resident until memory
    -- runs short); the 8-bit absmax vectors stay ordinary tensors
    local paged = opt.paged and n >= 100000 and block
    if paged then
      local each = S:bytes(name == "adam8bit" and "int8" or state_dt, n)
      S.paged_state_bytes = (S.paged_state_bytes or 0) + parts * each
      local rest = block - S:round_bytes(each)
      for _ = 1, parts do
        if rest > 0 then tape:alloc(rest, "optimizer_state", "optimizer.absmax") end
      end
    elseif block then
      for _ = 1, parts do tape:alloc(block, "optimizer_state", "optimizer.state") end
    end
    if step_bytes then tape:alloc(step_bytes, "optimizer_state", "optimizer.step_count") end
  end
  for _, p in ipairs(params) do
    if p.group then -- identical layers: the tape repeats the first copy's states
      local paged = S.paged_state_bytes or 0
      if S:repeat_allocs(p.count - 1, function() for _, q in ipairs(p.params) do one(q) end end)
        and S.paged_state_bytes then
        S.paged_state_bytes = paged + (S.paged_state_bytes - paged) * p.count
      end
    else
      one(p)
    end
  end
  -- TorchSharp without Dispose (run.undisposed_steps = k): the sqrt and
  -- denom temporaries of the k - 1 steps before this one are still waiting
  -- for the .NET collector, under the whole step
  local k = opt.undisposed_steps
  if k and k > 1 and (name == "adam" or name == "adamw") then
    local held = 0
    for _, p in ipairs(params) do
      if p.group then
        for _, q in ipairs(p.params) do held = held + 2 * q.b * p.count end
      else
        held = held + 2 * p.b
      end
    end
    S.tape:alloc(vram.mul(k - 1, held), "temporaries", "optimizer.undisposed_earlier_steps")
  end
end

-- The bytes of every parameter, and of the largest (groups: each copy).
local function total(params) return Sim.sum(params, "b") end

local function largest(params)
  local big = 0
  for _, p in ipairs(params) do
    for _, q in ipairs(p.group and p.params or { p }) do if q.b > big then big = q.b end end
  end
  return big
end

-- body(p) for every parameter in order. A group's copies after the second
-- start where the second started (the same live bytes in every category)
-- and repeat its events, so reach no higher peak (the tape keeps the
-- first): they are skipped, a timeline getting the second's events again.
local function each_param(S, params, body)
  local tape = S.tape
  for _, p in ipairs(params) do
    if not p.group then
      body(p)
    else
      local before
      for j = 0, p.count - 1 do
        local first = S.timeline and tape:timeline_len() + 1
        if j == 1 and p.count > 2 then before = tape:live_by_category() end
        for _, q in ipairs(p.params) do body(q) end
        if before then
          local same = true
          for cat, b in pairs(tape:live_by_category()) do same = same and before[cat] == b end
          before = nil
          if same then
            if first then tape:timeline_repeat(first, tape:timeline_len(), p.count - 2) end
            break
          end
        end
      end
    end
  end
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
      each_param(S, params, function(p)
        local g = coupled_wd and tape:alloc(p.b, "temporaries", "optimizer.grad_wd")
        if prev_g then tape:drop(prev_g) end
        prev_g = g
        local sq = tape:alloc(p.b, "temporaries", "optimizer.sqrt")
        local denom = tape:alloc(p.b, "temporaries", "optimizer.denom")
        if prev then tape:drop(sq, prev) else tape:drop(sq) end -- sq, then prev
        prev = denom
      end)
      if prev then tape:drop(prev) end
      if prev_g then tape:drop(prev_g) end
    end
  elseif name == "sgd" or name == "sgd_momentum" or name == "momentum" then
    -- weight decay makes grad + wd * param a new tensor (torch.optim.SGD):
    -- foreach, a list for every parameter (freed once the update is done or
    -- the momentum buffers take its place); one parameter at a time otherwise
    if wd ~= 0 and #params > 0 then
      tape:temp(fe and total(params) or largest(params), "temporaries", "optimizer.grad_wd")
    end
  elseif name == "adafactor" or name == "lion" then
    -- one update-sized temporary per parameter
    local big = largest(params)
    if big > 0 then tape:temp(big, "temporaries", "optimizer.update") end
  elseif name == "adam8bit" then
    local big = largest(params)
    if big > 0 then tape:temp(big, "temporaries", "optimizer.dequant") end
  end
end

return O
