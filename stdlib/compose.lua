-- Identical layers composed rather than simulated one by one (see
-- vr_tape_bulk): the first two layers and the last run in full, the ones in
-- between repeat layer 2's forward and the last layer's backward. Exact when
-- the layers are identical (the tests compare it with the full simulation).
local clone = require("vram").clone

local M = {}

-- Whether a stack of n layers can be composed under this run; units: the
-- caller composes units of several layers that checkpoint every n-th layer
-- or in segments (models/decoder.lua), else each layer must be its own.
-- Under autocast (M.layers: the weight casts) not in a compiled-estimate
-- probe, whose program measures a composed layer by its marks alone.
function M.enabled(S, n, run, units)
  return S.grad and not (S.autocast and run.trace) and run.compose ~= false and not run.cache
    and n >= 4 and (units or ((run.ckpt_every or 1) == 1 and (run.ckpt_segment or 1) == 1))
end

-- The keys of autocast's weight cache (Sim:autocast_arg: a parameter's id
-- to its cast) now, as a set.
local function cache_keys(S)
  local had = {}
  for k in pairs(S.cast_cache) do had[k] = true end
  return had
end

-- The casts made since `had` (cache_keys then), {key, cast} in the order
-- they were made (pairs' order varies from run to run).
local function casts_since(S, had)
  local made = {}
  for k, c in pairs(S.cast_cache) do
    if not had[k] then made[#made + 1] = { k, c } end
  end
  table.sort(made, function(a, b) return a[2].id < b[2].id end)
  return made
end

-- Under autocast a layer's weight casts live in autocast's cache
-- (Sim:autocast_arg) until autocast exits; those the cache alone holds (a
-- checkpointed layer's: no node saved them) go then, not in backward. A
-- bulk would keep the middle layers' until its backward (phase ends and
-- backward peaks above the walk's: 12 layers, full checkpointing,
-- forward_end 10,859,603,968 B composed, 10,017,298,432 walked), so they
-- are made as tensors of their own, held by the cache as layer 2's are,
-- and left out of the bulk. Returns the live and reserved bytes of one
-- layer's. cached: the cache's keys before layer 2.
local function middle_casts(S, cached, iters)
  if iters <= 0 then return 0, 0 end
  local tape, casts = S.tape, {}
  for _, kc in ipairs(casts_since(S, cached)) do
    if select(2, tape:bytes(kc[2].id)) == 1 then casts[#casts + 1] = kc[2] end
  end
  local l0, r0 = tape:live()
  local live, reserved
  -- one layer's copies, then the tape's repeats of them (Sim:repeat_allocs)
  local ids = {}
  local repeated, stride = S:repeat_allocs(iters - 1, function()
    for _, c in ipairs(casts) do
      ids[#ids + 1] = tape:alloc(c.b, S.cat, "autocast.weight_cast.composed")
    end
    if not live then
      local l1, r1 = tape:live()
      live, reserved = l1 - l0, r1 - r0
    end
  end)
  -- keyed -1, -2, ... in this autocast region (the parameters' ids are
  -- positive): alike in every micro-batch and process, as the exit drops
  -- the cache in pairs' order, which a timeline shows
  if S.cast_keys_of ~= S.cast_cache then S.cast_keys_of, S.cast_keys = S.cast_cache, 0 end
  local i = 0
  for j = 1, iters do
    for k, c in ipairs(casts) do
      i = i + 1
      S.cast_keys = S.cast_keys + 1
      S.cast_cache[-S.cast_keys] = { id = repeated and ids[k] + (j - 1) * stride or ids[i],
        n = c.n, dt = c.dt, b = c.b, rg = false }
    end
  end
  return live, reserved
end

-- Identical grad-free layers that keep nothing (a vision tower under
-- no_grad): one(i, x) runs layer i on x (dropping x) and returns its
-- output. When layer 2 leaves every category's live bytes as it found
-- them, layers 3 .. n-1 would replay its events from the same state and
-- reach no higher peak (the tape keeps the first): they are skipped, a
-- timeline getting layer 2's events once for each, and layer n runs on
-- layer 2's output. Otherwise every layer runs. layers (optional): the
-- stack, built as one group (Sim:build_layers): then, but under autocast
-- (its casts are Lua state), layer 1 is echoed and replayed for layer 2
-- and layer n where their input is alike to its own (M.echoed).
function M.grad_free(S, n, one, x, layers)
  local tape = S.tape
  if S.grad or not S.composable or n < 4 then
    for i = 1, n do x = one(i, x) end
    return x
  end
  local mt = layers and getmetatable(layers)
  local G = mt and mt.group
  if not G or G.count ~= n or S.autocast then G = nil end
  local e
  if G then x, e = M.echoed(S, G, nil, 0, one, 1, x) else x = one(1, x) end
  local before = tape:live_by_category()
  local first = S.timeline and tape:timeline_len() + 1
  if e then x, e = M.echoed(S, G, e, 1, one, 2, x) else x = one(2, x) end
  local same = true
  for cat, b in pairs(tape:live_by_category()) do same = same and before[cat] == b end
  if not same then
    for i = 3, n do x = one(i, x) end
    return x
  end
  if first then tape:timeline_repeat(first, tape:timeline_len(), n - 3) end
  if e then return (M.echoed(S, G, e, n - 1, one, n, x)) end
  return one(n, x)
end

-- Trainable parameters reachable from a layer's table.
local function params(l, out)
  for _, v in pairs(l) do
    if type(v) == "table" then
      if v.param then
        if v.rg then out[#out + 1] = v end
      else
        params(v, out)
      end
    end
  end
  return out
end

local by_id = function(a, b) return a.id < b.id end

-- The {param, bytes} gradient edges of layers 3 .. n-1, layer by layer,
-- their count per layer, and for layers built as one group
-- (Sim:build_layers) the id stride from one layer to the next: then the
-- edges are layer 3's alone (the tape adds the stride for the others),
-- read off the group's first layer. Units of `per` layers (a metatable
-- {group, per, skip}, models/decoder.lua) are read the same way, per copies
-- each, unit 1 being copies skip .. skip + per - 1 (the layers before it
-- walked).
local function middle_edges(layers, n)
  local edges, nper = {}, nil
  local mt = getmetatable(layers)
  local G, per = mt and mt.group, mt and mt.per or 1
  local skip = mt and mt.skip or 0 -- the group's copies before unit 1
  local ps = G and G.count >= skip + n * per and params(G.template, {})
  for _, p in ipairs(ps or {}) do
    if not G.index[p] then ps = nil; break end -- a parameter from outside the layer
  end
  if ps then
    table.sort(ps, by_id)
    for c = skip + 2 * per, skip + 3 * per - 1 do -- unit 3: copies skip + 2 * per on
      local off = c * G.stride
      for _, p in ipairs(ps) do
        edges[#edges + 1] = p.id + off
        edges[#edges + 1] = p.b
      end
    end
    return edges, #ps * per, per * G.stride
  end
  for i = 3, n - 1 do
    -- in creation order: pairs() order changes from one process to the next
    -- (string hashes are seeded), and with it the timeline's event order
    ps = params(layers[i], {})
    table.sort(ps, by_id)
    nper = nper or #ps
    for _, p in ipairs(ps) do
      edges[#edges + 1] = p.id
      edges[#edges + 1] = p.b
    end
  end
  return edges, nper
end

-- Whether two tensors differ in nothing the layers' Lua code reads (every
-- field but the id).
local function alike(a, b)
  for k, v in pairs(a) do if k ~= "id" and b[k] ~= v then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
M.alike = alike

-- Tensor x's table with another id (a replayed layer's output, its cache).
function M.moved(x, id)
  local out = clone(x) -- (a tensor's table is plain: vram.clone sizes the copy at once)
  out.id = id
  return out
end

-- Layers kept from one simulation for the next (fit --knobs simulates
-- dozens of runs that differ only in their loss kernel, their optimizer or
-- what their layers leave alone). While M.keeping runs f, each simulator
-- made with an identity (stdlib/step.lua new_sim: the step, an RL update, a
-- layout's pass by what its layers read) takes part: each layer its
-- outermost M.layers walks is kept (tape:echo_keep) under `key` (the run
-- written out less what layers never read), the identity and the stack's
-- number in that simulator (each group of layers, Sim:build_layers,
-- numbered when first walked: layers 1 and 2 of one call and every
-- micro-batch's walk of it share the name). A later walk under the same
-- name, in this simulator or another, whose input and the tensors the
-- layers read besides it (externals: masks, rotary tables) are alike,
-- takes it in place of the walk (tape:echo_take), its ids mapped:
-- the input and externals to this one's, the layer's parameters to this
-- one's copy, the tensors it made to new ones. The tape refuses when the
-- echo names any other tensor, or a checkpoint segment is open here and was
-- not there (or the reverse). What the same Lua code does on alike inputs
-- (the key holds everything else it reads) is what the walk would do, as
-- for the layers composed within one simulation. tests/lua/test_fit.lua
-- compares fit.knobs with and without.
local context
local KEPT_MAX = 4 -- layers kept under one name (inputs or externals not alike)
-- a replay's casts: tape:echo_replay answers at most 1,024 ids, the
-- output's and theirs (runtime/bind/ltape.c ECHO_QUERIES)
local MAX_CASTS = 1023
local NO_PAIRS = {} -- (read only)
function M.keeping(cache, key, f, ...)
  local before = context
  context = { cache = cache, key = key }
  local out = table.pack(pcall(f, ...))
  context = before
  if not out[1] then error(out[2], 0) end
  return table.unpack(out, 2, out.n)
end

-- Whether M.keeping runs (a caller builds an identity only then).
function M.is_keeping() return context ~= nil end

-- The part in M.keeping of a new simulator named by identity (a string
-- that tells it from every other simulator the same run makes), or nil.
function M.kept(identity)
  if context and identity then
    return { cache = context.cache, key = context.key .. "|" .. identity, n = 0, stacks = {} }
  end
end

-- one(i, x) runs layer i on x (dropping x) and returns its output; layers[i]
-- holds layer i's parameters.
--
-- Layers built as one group (Sim:build_layers) are echoed rather than
-- walked again: the tape keeps layer 1's allocs, drops, retains, temps and
-- nodes while doing them (tape:echo) and replays them (tape:echo_replay)
-- with the layer's tensors new, its input the previous layer's output and
-- its parameters the next copy's, masks and rotary tables the same -- what
-- the same Lua code does on an input alike to layer 1's. Layer 2 echoes
-- layer 1 when its input is alike; otherwise (layer 1 reads the embedding's
-- view, which may not require grad) layer 2 runs and is echoed for layer
-- n. A checkpointed layer echoes whole (the replay records its segment
-- again, ids mapped, for backward to recompute), and so do units of `per`
-- layers (checkpointing every n-th layer or in segments, models/decoder.lua:
-- the unit's parameters per copies of the group's). Anything else that
-- spoils an echo (tape:echo_end false) leaves every simulated layer run.
-- Under autocast the state a layer keeps outside the tape is its weight
-- casts in autocast's cache (Sim:autocast_arg: a parameter's id to its
-- cast, held until autocast exits): a replay puts the casts it made in the
-- cache under its own parameters' ids, in the order the walk made them
-- (the order the cache's pairs, and so the exit's drops, follow). A layer
-- that casts a parameter of another layer, or runs inside a checkpoint
-- segment opened around the stack (whose list of casts is Lua's too), is
-- walked, and a layer is replayed only where none of its casts is in the
-- cache already (a walk would find it there and make none); a layer kept
-- across simulations (M.keeping) carries its casts the same way.
-- externals (optional): the tensors the layers read besides their input and
-- parameters (masks, rotary tables: models/decoder.lua D.externals), by
-- which a layer kept from another simulation is mapped (M.keeping); without
-- them a kept layer naming any is refused and walked.
function M.layers(S, layers, n, one, x, label, externals)
  local tape = S.tape
  local mt = getmetatable(layers)
  local G = mt and mt.group
  local per = mt and mt.per or 1
  local skip = mt and mt.skip or 0 -- the group's copies before unit 1 (walked layers)
  local echo = G and G.count >= skip + n * per and (per > 1 or G.count == n + skip)
    and not (S.autocast and S.segment)
  local span = G and per * G.stride -- a unit's parameter ids
  -- unit i's first parameter id
  local function first_param(i) return G.first + skip * G.stride + (i - 1) * span end
  externals = externals or NO_PAIRS
  -- layer i on `input` as the echoed layer did on its own. echo: the ids as
  -- its events name them -- its input (in_id), its first parameter (lo),
  -- its output's table (output) -- and the externals' {theirs, ours} pairs
  -- when another simulation kept it (pairs); each mapped to this one's
  -- its casts (casts: {parameter id, cast} as made) when under autocast
  local function replay(i, input)
    local e = echo
    local ids = { e.in_id, input.id }
    for k = 1, #e.pairs do ids[#ids + 1] = e.pairs[k] end
    local off = first_param(i) - e.lo
    if not e.casts then
      return M.moved(e.output, tape:echo_replay(ids, e.lo, e.lo + span, off, e.output.id))
    end
    local query = { e.output.id }
    for k, c in ipairs(e.casts) do query[k + 1] = c[2].id end
    local got = table.pack(tape:echo_replay(ids, e.lo, e.lo + span, off, query))
    local cache = S.cast_cache
    for k, c in ipairs(e.casts) do cache[c[1] + off] = M.moved(c[2], got[k + 1]) end
    return M.moved(e.output, got[1])
  end
  -- the casts layer i made since `had` (cache_keys then), in the order it
  -- made them, or nil when one is not of its own parameters or there are
  -- more than a replay answers for (an MoE layer's experts)
  local function casts_of(i, had)
    local made, lo = casts_since(S, had), first_param(i)
    if #made > MAX_CASTS then return nil end
    for _, kc in ipairs(made) do
      if kc[1] < lo or kc[1] >= lo + span then return nil end
    end
    return made
  end
  -- whether casts made as `casts` were, shifted by off, would be new to the
  -- cache (a walk finding its casts there would make none)
  local function fresh(casts, off)
    for _, c in ipairs(casts or NO_PAIRS) do
      if S.cast_cache[c[1] + off] then return false end
    end
    return true
  end
  local function replayable(i) return fresh(echo.casts, first_param(i) - echo.lo) end
  local K = echo and S.kept and not S.keeping and S.kept -- outermost layers only
  local slot -- the stack's name among the kept layers
  if K then
    local s = K.stacks[G]
    if not s then
      K.n = K.n + 1
      s = K.n
      K.stacks[G] = s
    end
    slot = K.key .. "#" .. s .. label
  end
  -- the kept layer k's externals paired with this simulation's, or nil
  local function paired(k)
    if #k.externals ~= #externals then return nil end
    local ids = {}
    for j, a in ipairs(k.externals) do
      local b = externals[j]
      if not alike(a, b) then return nil end
      ids[#ids + 1] = a.id
      ids[#ids + 1] = b.id
    end
    return ids
  end
  local function run(i, input)
    local list
    if K then
      list = K.cache[slot] or {}
      K.cache[slot] = list
      for _, k in ipairs(list) do -- (a few at most)
        local ext = k.span == span and alike(k.input, input) and paired(k)
        -- (kept under autocast exactly when its casts were listed)
        local casts_ok = (k.casts ~= nil) == (S.autocast ~= nil)
        if ext and casts_ok and fresh(k.casts, first_param(i) - k.lo) then
          local ids = { k.input.id, input.id }
          for j = 1, #ext do ids[#ids + 1] = ext[j] end
          if tape:echo_take(k.echo, ids, k.lo, k.lo + span, first_param(i) - k.lo) then
            echo = { in_id = k.input.id, lo = k.lo, pairs = ext, output = k.output,
              casts = k.casts }
            return replay(i, input)
          end
        end
      end
      S.keeping = true -- layers composed inside this one are neither counted nor kept
    end
    local had = echo and S.autocast and cache_keys(S) -- (before the walk)
    if echo then tape:echo() end
    local out = one(i, input)
    S.keeping = nil
    if echo then
      local casts = had and casts_of(i, had)
      echo = tape:echo_end() and (casts or not had) and { in_id = input.id,
        lo = first_param(i), pairs = NO_PAIRS, output = out, casts = casts }
      local kept = echo and list and #list < KEPT_MAX and tape:echo_keep()
      if kept then
        local ext = {}
        for j, t in ipairs(externals) do ext[j] = M.moved(t, t.id) end
        list[#list + 1] = { echo = kept, input = M.moved(input, input.id), lo = first_param(i),
          span = span, externals = ext, output = M.moved(out, out.id), casts = echo.casts }
      end
    end
    return out
  end
  local first = x
  x = run(1, x)
  local before, rbefore = tape:mark()
  local cached = S.autocast and cache_keys(S)
  if echo and alike(first, x) and replayable(2) then
    x = replay(2, x)
  else
    x = run(2, x)
  end
  local after, rafter = tape:mark()
  local cl, cr = 0, 0
  if cached then cl, cr = middle_casts(S, cached, n - 3) end
  local edges, nper, stride = middle_edges(layers, n)
  local bulk = tape:bulk(after - before - cl, rafter - rbefore - cr, n - 3, edges, nper or 0,
    label, stride)
  x = echo and replayable(n) and replay(n, x) or one(n, x)
  tape:bulk_end(bulk)
  return x
end

-- Layer i of a stack built as one group G (Sim:build_layers), its copy
-- `copy`, on x: the echo e ({copy, input, output} of the layer the tape
-- echoed last) replayed when x is alike to e's input -- what the same Lua
-- code does on an alike input, its parameters the copy's (as M.layers
-- replays) -- else one(i, x) run under a new echo. Returns the output and
-- the echo now ready to replay, nil when the run spoiled it.
function M.echoed(S, G, e, copy, one, i, x)
  local tape = S.tape
  if e and alike(e.input, x) then
    local lo = G.first + e.copy * G.stride
    return M.moved(e.output, tape:echo_replay({ e.input.id, x.id }, lo, lo + G.stride,
      (copy - e.copy) * G.stride, e.output.id)), e
  end
  tape:echo()
  local out = one(i, x)
  return out, tape:echo_end() and { copy = copy, input = x, output = out } or nil
end

-- Layers run one after another inside one checkpointed segment
-- (models/decoder.lua's walk), the k-th (k = 1 .. n) copy c0 + k - 1 of
-- group G (Sim:build_layers): one(k, x) runs it on x and returns its
-- output. x is the first's input, kept; each later input is dropped after
-- its layer. Each layer replays the echo of one before it whose input was
-- alike (M.echoed), so that a segment runs one layer, or two where the
-- first reads the embedding's view; with G nil, or an echo spoiled, every
-- layer runs. The caller sees that nothing outside the tape changes with
-- the layer (autocast's casts, a KV cache). Returns the last output.
function M.chain(S, G, c0, n, one, x)
  local e
  for k = 1, n do
    local out
    if G then
      out, e = M.echoed(S, G, e, c0 + k - 1, one, k, x)
      if not e then G = nil end
    else
      out = one(k, x)
    end
    if k > 1 then S:drop(x) end
    x = out
  end
  return x
end

return M
