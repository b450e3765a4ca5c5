-- Tensors on the allocation simulator. A handle is one Python reference to
-- a storage: views retain the storage, `drop` is Python letting go. Ops call
-- `sim:node` with what PyTorch's autograd saves and where gradients flow;
-- vram.tape does the counting and replays backward.
local vram = require("vram")

local Sim = {}
Sim.__index = Sim

local bytes = vram.bytes

-- Sim:bytes's memo, one per allocator rounding (false: none), shared by the
-- simulators of a process: every step asks for the same few dozen sizes
-- (bytes of n elements of a dtype, rounded: a pure function). Started
-- again (for the simulators made from then on) past SIZES_MAX entries, so
-- a long sweep's many shapes do not pile up.
local SIZES_MAX = 100000
local sizes, sizes_n = {}, 0

-- opts.round: the allocator's block size (CUDA caching allocator: 512 B);
-- every tensor then counts as its block, as max_memory_allocated does.
function Sim.new(opts)
  opts = opts or {}
  local key = opts.round or false
  local memo = sizes[key]
  if not memo then
    memo = {}
    sizes[key] = memo
  end
  return setmetatable({
    tape = opts.tape or vram.tape(),
    grad = true,        -- torch.is_grad_enabled()
    cat = "activations",
    round = opts.round,
    params = {},        -- every parameter created, in model.parameters() order
    params_on_tape = true,
    sizes = memo,       -- dtype -> {elements -> bytes}: Sim:bytes, memoized
  }, Sim)
end

-- Parameters created from now on hold their bytes on the tape (true) or
-- hold none there (false: a sharded layout allocates their states itself,
-- stdlib/parallel.lua). They are listed in S.params either way.
function Sim:set_param_storage(on_tape)
  self.params_on_tape = on_tape and true or false
end

-- The category ops allocate into from now on ("activations",
-- "logits_loss", ...); returns the previous one.
function Sim:set_category(cat)
  local prev = self.cat
  self.cat = cat
  return prev
end

-- A compiled estimate's probe (stdlib/compiled.lua, stdlib/compiled_parallel.lua;
-- S.probe, set by stdlib/step.lua new_sim) traces a step at small sizes and
-- fits each change as an integer polynomial in them, assuming one op
-- structure at every size. Code whose ops or bytes follow a size through no
-- polynomial (a chunk count, a min with a constant, a ceiling) calls this
-- before it does: under a probe it refuses the compile with why (the
-- compiled paths report it, and the sizes are simulated); elsewhere it does
-- nothing.
Sim.NOT_POLYNOMIAL = "no polynomial in the sizes: "
function Sim:sized(why)
  if self.probe then error({ msg = Sim.NOT_POLYNOMIAL .. why, not_polynomial = true }, 0) end
end

-- A request of b bytes as the allocator hands it out (the tape's rounding,
-- checked: vram.round_up).
function Sim:round_bytes(b)
  return self.round and vram.round_up(b, self.round) or b
end

-- Bytes of n elements as the allocator hands them out (asked for the same
-- few sizes thousands of times a step, so remembered: Sim.new's memo).
-- t[k], a table made on first use.
local function sub(t, k)
  local v = t[k]
  if not v then
    v = {}
    t[k] = v
  end
  return v
end

function Sim:bytes(dt, n)
  local by = self.sizes[dt] or sub(self.sizes, dt)
  local b = by[n]
  if not b then
    b = self:round_bytes(bytes(dt, n))
    by[n] = b
    sizes_n = sizes_n + 1
    if sizes_n > SIZES_MAX then sizes, sizes_n = {}, 0 end
  end
  return b
end

-- A fresh tensor of n elements of dtype dt. rg: requires grad.
-- self.split (label -> k): ops whose output is scattered over k ranks
-- (Megatron sequence parallelism: row-parallel outputs and the embedding
-- leave each rank with 1/k of the rows; norms and residuals then follow).
function Sim:new_tensor(n, dt, label, rg, cat)
  local split = self.split
  if split then
    local k = split[label]
    if k then n = n // k end
  end
  local by = self.sizes[dt] -- Sim:bytes's memo read here: every op comes this way
  local b = by and by[n] or self:bytes(dt, n)
  return { id = self.tape:alloc(b, cat or self.cat, label), n = n, dt = dt, b = b,
           rg = rg and self.grad or false }
end

-- A parameter of n elements of dt. o (optional): { cat (default weights),
-- bytes: what it holds when it is not n elements of dt (a quantized
-- checkpoint's weight with its scales, stdlib/quant.lua) }.
-- While the load phase runs (stdlib/load.lua), each parameter's arrival
-- transient follows it (self.on_load).
function Sim:param(n, dt, trainable, label, o)
  local b = self.params_on_tape and (o and o.bytes or self:bytes(dt, n)) or 0
  local p = { id = self.tape:param(b, o and o.cat or "weights", label), n = n, dt = dt, b = b,
              rg = trainable and true or false, param = true, label = label }
  self.params[#self.params + 1] = p
  if self.on_load and b > 0 then self.on_load(p) end
  return p
end

-- An adapter's parameter (peft's LoRA): not in the checkpoint, created
-- after the load. While the load runs its bytes wait for flush_adapters
-- (the parameter itself holds none on the tape; p.b is its size for
-- gradients and optimizer states).
function Sim:adapter_param(n, dt, label)
  if not self.on_load then return self:param(n, dt, true, label) end
  local on_load = self.on_load
  self.on_load = nil
  local p = self:param(n, dt, true, label, { bytes = 0 })
  self.on_load = on_load
  p.b = self.params_on_tape and self:bytes(dt, n) or 0
  self.adapters_later = self.adapters_later or {}
  self.adapters_later[#self.adapters_later + 1] = { p.b, label }
  return p
end

function Sim:flush_adapters()
  local tape = self.tape
  local function one(a)
    if a[1] > 0 then tape:alloc(a[1], "weights", a[2]) end
  end
  for _, a in ipairs(self.adapters_later or {}) do
    if a.group then -- a group's adapters, once per copy
      self:repeat_allocs(a.count - 1, function() for _, x in ipairs(a.list) do one(x) end end)
    else
      one(a)
    end
  end
  self.adapters_later = nil
end

-- Runs fn, which only allocates and frees temporaries on the tape, then
-- has the tape do the same `times` more times (vr_tape_capture_repeat: the
-- same events, in C). Returns true and the tensors one run creates when
-- the tape repeated them (the i-th tensor of repeat j is the i-th of fn's
-- run, its id plus j times that stride), false when fn itself ran again
-- (a capture already open, or fn did more).
function Sim:repeat_allocs(times, fn)
  local tape = self.tape
  if self.capturing or times <= 0 then
    fn()
    for _ = 1, times do fn() end
    return false
  end
  self.capturing = true
  tape:capture()
  fn()
  local stride = tape:capture_end()
  self.capturing = false
  if stride then
    tape:capture_repeat(times)
    return true, stride
  end
  for _ = 1, times do fn() end
  return false
end

-- Parameter groups (issue 18: the bookkeeping of identical layers).
-- A group in S.params, {group = true, params, count, stride}, stands for
-- `count` copies of its parameters in their creation order: copy 0 is
-- params itself, copy j of parameter p the tensor p.id + j * stride, of
-- p's size. Consumers that need every parameter as a table read
-- Sim.expand(list); the rest handle a group in one go.

-- Copy j of a group's parameter p (made once, then the same table).
function Sim.param_copy(G, p, j)
  if j == 0 then return p end
  local by = G.copies[p] or sub(G.copies, p)
  local c = by[j]
  if not c then
    -- a parameter's own fields first (the table made at its size), then
    -- any other it carries
    c = { id = p.id + j * G.stride, n = p.n, dt = p.dt, b = p.b, rg = p.rg, param = p.param,
          label = p.label, rows = p.rows }
    for k, v in pairs(p) do
      if c[k] == nil then c[k] = v end
    end
    by[j] = c
  end
  return c
end

-- A group of some of G's parameters (the trainable ones), sharing its copies.
function Sim.subgroup(G, params)
  return { group = true, params = params, count = G.count, stride = G.stride,
    copies = G.copies, index = G.index }
end

-- Every parameter of a list with groups, one table each, in creation order.
function Sim.expand(list)
  local out = {}
  for _, p in ipairs(list) do
    if p.group then
      for j = 0, p.count - 1 do
        for _, q in ipairs(p.params) do out[#out + 1] = Sim.param_copy(p, q, j) end
      end
    else
      out[#out + 1] = p
    end
  end
  return out
end

function Sim:flat_params() return Sim.expand(self.params) end

-- The sum of field k ("b", "n") over every parameter of a list with groups.
function Sim.sum(list, k)
  local s = 0
  for _, p in ipairs(list) do
    if p.group then
      for _, q in ipairs(p.params) do s = s + q[k] * p.count end
    else
      s = s + p[k]
    end
  end
  return s
end

-- The entries of list after index `from` become one group entry.
local function fold(list, from, G)
  if not list then return end
  local moved = {}
  for i = from + 1, #list do
    moved[#moved + 1] = list[i]
    list[i] = nil
  end
  G.params = moved
  list[from + 1] = G
  return G
end

-- Whether table x holds a parameter, at any depth (memo: table -> bool).
local function holds(x, memo)
  if memo[x] ~= nil then return memo[x] end
  memo[x] = false -- (a cycle holds nothing more)
  local any = x.param == true
  if not any then
    for _, v in pairs(x) do
      if type(v) == "table" and holds(v, memo) then any = true end
    end
  end
  memo[x] = any
  return any
end

-- Layer table x as copy j of the group: its parameters replaced by their
-- copies, the tables holding them rebuilt, everything else shared.
local function clone(x, j, G, memo)
  if x.param then return G.index[x] and Sim.param_copy(G, x, j) or x end
  if not memo[x] then return x end
  local c = {}
  for k, v in pairs(x) do c[k] = type(v) == "table" and clone(v, j, G, memo) or v end
  return c
end

-- Layers 1 .. n of a stack, build(i) making layer i's parameters and
-- returning its table. uniform: every layer builds the same parameters.
-- Then layer 1 is built once while the tape captures it, and the tape
-- repeats it for layers 2 .. n (the same allocations, load transients,
-- peaks and timeline events, in C). Their parameters are one group (in
-- S.params, S.load_params and the adapters waiting for the setup), layer
-- i being copy i - 1, and the tables of layers 2 .. n are made only when
-- read (layers[i]); stdlib/compose.lua takes its gradients from the group.
-- tests/lua/test_compose.lua compares with every layer built.
function Sim:build_layers(n, build, uniform)
  local ls = {}
  if not (uniform and self.group_layers and n >= 2 and not self.capturing) then
    for i = 1, n do ls[i] = build(i) end
    return ls
  end
  local np, nl = #self.params, self.load_params and #self.load_params
  local na = self.adapters_later and #self.adapters_later or 0
  local tape = self.tape
  self.capturing = true
  tape:capture()
  local template = build(1)
  ls[1] = template
  local stride, first = tape:capture_end()
  self.capturing = false
  if not stride then
    for i = 2, n do ls[i] = build(i) end
    return ls
  end
  tape:capture_repeat(n - 1)
  -- first: layer 1's first tensor (layer i's tensors are first + (i - 1) * stride on)
  local G = fold(self.params, np, { group = true, count = n, stride = stride, first = first,
    copies = {}, index = {}, template = template })
  for _, p in ipairs(G.params) do G.index[p] = true end
  fold(self.load_params, nl, { group = true, count = n, stride = stride,
    copies = G.copies, index = G.index })
  if self.adapters_later and #self.adapters_later > na then
    local A = fold(self.adapters_later, na, { group = true, count = n })
    A.list, A.params = A.params, nil
  end
  -- which of the template's tables hold parameters, found on the first
  -- read of a copy (a composed step reads none: stdlib/compose.lua takes
  -- the group's edges from the template itself)
  local memo
  setmetatable(ls, {
    __index = function(t, i)
      if math.type(i) ~= "integer" or i < 2 or i > n then return nil end
      if not memo then
        memo = {}
        holds(template, memo)
      end
      local l = clone(template, i - 1, G, memo)
      rawset(t, i, l)
      return l
    end,
    __len = function() return n end,
    group = G, -- layer i is copy i - 1 (stdlib/compose.lua)
  })
  return ls
end

-- A view: same storage, one more reference, optionally another element count.
function Sim:view(x)
  self.tape:retain(x.id)
  return { id = x.id, n = x.n, dt = x.dt, b = x.b, rg = x.rg, param = x.param }
end

function Sim:drop(...)
  self.tape:drop_of(...) -- each x.id, nil and false skipped
end

function Sim:temp(b, label) self.tape:temp(b, "temporaries", label) end

-- Records the backward node of an op whose outputs are `outs`.
-- saved: tensors autograd keeps; edges: list of {tensor, grad_bytes} or
-- {tensor, alias=k} (gradient of output k passes through unchanged).
-- Nothing is recorded when no input requires grad or grad mode is off.
function Sim:node(label, saved, edges, outs, temp)
  if not self.grad then return end
  self.tape:node_of(saved, edges, outs, temp, label) -- only the edges whose tensor has rg
end

-- The lists node_of reads for Sim:op1, op2 and node_own, this module's
-- own: an op is the commonest thing a step does, and the lists it would
-- make are most of a step's garbage. Each call fills every slot it hands
-- over, a list ending at its first nil as node_of reads it (so an error
-- halfway leaves nothing for the next call); what they hold stays there
-- until the next op.
local OUTS, SAVED, EDGES = {}, {}, {}
local OWN = { {}, {}, {} }                     -- {x} or {x, bytes}
local ALIASED = { { alias = 1 }, { alias = 1 } } -- {x, alias = 1}

-- Edge table i for x with grad nil (x's own bytes), a byte count or
-- "alias" (the output's gradient passes through unchanged).
local function edge(i, x, grad)
  if grad == "alias" then
    local e = ALIASED[i]
    e[1] = x
    return e
  end
  local e = OWN[i]
  e[1], e[2] = x, grad
  return e
end

-- Sim:node(label, {s1, s2}, {{e1}, {e2}, {e3}}, {out}, temp) without the
-- lists: edges that carry their tensors' own bytes; each list ends at its
-- first nil, as node_of reads a list.
function Sim:node_own(label, out, temp, s1, s2, e1, e2, e3)
  if not self.grad then return end
  SAVED[1], SAVED[2] = s1, s2
  EDGES[1], EDGES[2] = edge(1, e1), e2 and edge(2, e2) or nil
  EDGES[3] = e2 and e3 and edge(3, e3) or nil
  OUTS[1] = out
  self.tape:node_of(SAVED, EDGES, OUTS, temp, label)
end

-- Whether any of the inputs requires grad (with grad mode on).
function Sim:rg(a, b, c, ...)
  if not self.grad then return false end
  -- (the callers pass at most three: no select() over them)
  if a and a.rg or b and b.rg or c and c.rg then return true end
  for i = 1, select("#", ...) do
    local x = select(i, ...)
    if x and x.rg then return true end
  end
  return false
end

-- out = f(inputs) as a new tensor; the common case of every op. saved and
-- edges as in Sim:node. temps (optional): { fwd = bytes the forward
-- allocates and frees, bwd = bytes the backward does } (a cast copy of a
-- mixed-dtype operand, a kernel's scratch).
function Sim:op(label, n, dt, ins, saved, edges, temps)
  local rg = false
  if self.grad then -- Sim:rg(table.unpack(ins)), without the unpacking
    for i = 1, #ins do
      local x = ins[i]
      if x and x.rg then rg = true; break end
    end
  end
  local out = self:new_tensor(n, dt, label, rg)
  if temps then
    local fwd = temps.fwd
    if fwd and fwd > 0 then self.tape:temp(fwd, "temporaries", label) end
  end
  if rg then -- (out.rg: rg with grad mode on)
    OUTS[1] = out
    self.tape:node_of(saved, edges, OUTS, temps and temps.bwd, label)
  end
  return out
end

-- Sim:op on one input x without the lists: Sim:op(label, n, dt, {x},
-- {keep}, {edge}, {fwd = fwd, bwd = bwd}), the edge x's with grad nil (its
-- own bytes), a byte count or "alias" (the output's gradient passes
-- through: {x, alias = 1}). keep: the tensor autograd saves, or nil.
function Sim:op1(label, n, dt, x, keep, grad, fwd, bwd)
  local rg = self.grad and x.rg and true or false
  local out = self:new_tensor(n, dt, label, rg)
  if fwd and fwd > 0 then self.tape:temp(fwd, "temporaries", label) end
  if rg then
    SAVED[1], SAVED[2], EDGES[1], EDGES[2], OUTS[1] = keep, nil, edge(1, x, grad), nil, out
    self.tape:node_of(SAVED, EDGES, OUTS, bwd, label)
  end
  return out
end

-- Sim:op on inputs a and b that saves nothing, without the lists: the
-- edges a's with grad ga and b's with gb as in Sim:op1; fwd as temps.fwd.
function Sim:op2(label, n, dt, a, b, ga, gb, fwd)
  local rg = self.grad and (a.rg or b.rg) and true or false
  local out = self:new_tensor(n, dt, label, rg)
  if fwd and fwd > 0 then self.tape:temp(fwd, "temporaries", label) end
  if rg then
    SAVED[1], EDGES[1], EDGES[2], EDGES[3], OUTS[1] = nil, edge(1, a, ga), edge(2, b, gb), nil, out
    self.tape:node_of(SAVED, EDGES, OUTS, nil, label)
  end
  return out
end

-- x.to(dt): the same tensor when dt matches (a new reference), else a copy
-- whose backward casts the gradient back (no saved tensors).
function Sim:to(x, dt, label)
  if x.dt == dt then return self:view(x) end
  return self:op1(label or "aten::_to_copy", x.n, dt, x)
end

-- Promotion of two floating dtypes: fp32 wins, else the first.
function Sim.promote(a, b)
  if a == "fp32" or b == "fp32" then return "fp32" end
  return a
end

-- An argument of an op that autocast runs in lower precision: fp32 tensors
-- are cast; leaf parameters that require grad are cast once per forward
-- (autocast's weight cache), everything else at every use.
function Sim:autocast_arg(x, label)
  local ac = self.autocast
  if not ac or x.dt ~= "fp32" then return self:view(x) end
  if x.param and x.rg then
    local c = self.cast_cache[x.id]
    if not c then
      c = self:op1("autocast.weight_cast", x.n, ac, x)
      self.cast_cache[x.id] = c
      if self.segment then self.segment[#self.segment + 1] = c end
    end
    return self:view(c)
  end
  return self:op1(label or "autocast.cast", x.n, ac, x)
end

function Sim:autocast_enter(dt)
  self.autocast, self.cast_cache = dt, {}
end

-- Autocast off for one op whose operands are already cast (or that runs in
-- fp32 under autocast), keeping its weight cache: returns what
-- autocast_resume restores.
function Sim:autocast_pause()
  local ac = self.autocast
  self.autocast = nil
  return ac
end

function Sim:autocast_resume(ac)
  self.autocast = ac
end

-- Leaving autocast clears the weight cache.
function Sim:autocast_exit()
  for _, c in pairs(self.cast_cache or {}) do self:drop(c) end
  self.autocast, self.cast_cache = nil, {}
end

function Sim:checkpoint_begin()
  self.tape:ckpt_begin()
  self.segment = {}
end

function Sim:checkpoint_end(inputs, outputs, label)
  -- the recomputation runs in its own autocast region: its cache lets go of
  -- the casts when the recompute ends
  for _, c in ipairs(self.segment) do self.tape:replay_drop(c.id) end
  self.segment = nil
  local ins, outs = {}, {}
  for i, x in ipairs(inputs) do ins[i] = x.id end
  for i, x in ipairs(outputs) do outs[i] = x.id end
  self.tape:ckpt_end(ins, outs, label)
end

return Sim
