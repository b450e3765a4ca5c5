-- Per-rank budgets beyond one GPU (issue 14): the `parallel:` table of a run
-- spec, the rank-local model each rank holds (tensor, pipeline, context and
-- expert splits) run op by op on the simulator, and the model states each
-- rank keeps under DDP, DeepSpeed ZeRO 1-3 and FSDP, with offload.
--
-- What comes from where:
--  * activations, logits, temporaries: the simulator on the rank-local
--    shapes (heads, kv heads, intermediate and vocab over tp; rows over tp
--    in sequence-parallel regions; seq over cp; the stage's layers);
--  * model states: exact element counts of the parameters the simulator
--    created, partitioned and padded the way each framework does;
--  * pipeline in-flight micro-batches: the bytes one micro-batch's forward
--    leaves held, measured on the simulator, times the schedule's count;
--  * gathered-parameter windows and bucket buffers: from the knobs and the
--    parameter sizes, placed on the tape for the phase they live in;
--  * NCCL communicator buffers: an assumption, printed.
local vram = require("vram")
local errors = require("stdlib.errors")
local cfgutil = require("stdlib.config")
local step = require("stdlib.step")
local compose = require("stdlib.compose")
local run_key = require("stdlib.run").key
local spans = require("stdlib.spans") -- a step's peaks from measured spans (lean searches)
local optim = require("stdlib.optim")
local report = require("stdlib.report")
local frameworks = require("stdlib.frameworks")
local gpus = require("stdlib.gpus")
local Sim = require("stdlib.sim")

local M = {}

M.FSDP = { "full_shard", "shard_grad_op", "hybrid_shard", "no_shard" }
M.OFFLOAD = { "none", "cpu", "nvme" }
M.SCHEDULES = { "1f1b", "interleaved" }

-- Framework defaults (DeepSpeed runtime/zero/config.py, torch DDP, FSDP).
M.DEFAULTS = {
  bucket_cap_mb = 25, -- torch.nn.parallel.DistributedDataParallel
  reduce_bucket_size = 500000000, -- DeepSpeed, elements
  allgather_bucket_size = 500000000,
  stage3_prefetch_bucket_size = 50000000,
  stage3_max_live_parameters = 1000000000,
  stage3_param_persistence_threshold = 100000,
  sub_group_size = 1000000000,
  gpus_per_node = 8,
  -- DeepSpeed offload_param / offload_optimizer aio staging defaults
  nvme_param_buffer_count = 5, nvme_param_buffer_size = 100000000,
  nvme_optimizer_buffer_count = 4,
}

-- Assumed, not derived: NCCL_BUFFSIZE (4 MiB) x 2 (send, receive) x 16
-- channels per communicator a rank joins.
M.NCCL_PER_COMM = 4 * (1 << 20) * 2 * 16

local KEYS = { dp = 1, tp = 1, pp = 1, cp = 1, ep = 1, sequence_parallel = 1, pp_schedule = 1,
  virtual_stages = 1, microbatches = 1, zero = 1, fsdp = 1, fsdp_version = 1, gpus_per_node = 1,
  offload = 1, bucket_cap_mb = 1, gradient_as_bucket_view = 1, reduce_bucket_size = 1,
  allgather_bucket_size = 1, overlap_comm = 1, contiguous_gradients = 1,
  stage3_prefetch_bucket_size = 1, stage3_max_live_parameters = 1,
  stage3_param_persistence_threshold = 1, sub_group_size = 1, reshard_after_forward = 1,
  limit_all_gathers = 1, world_size = 1, buckets = 1, dp_replicate = 1, dp_shard = 1,
  stage3_max_reuse_distance = 1 }
M.KEYS = KEYS -- the fields a `parallel:` table may have (stdlib/knobs.lua: each a knob)

-- DeepSpeed's sizes as a translated config groups them (stdlib/formats):
-- `buckets: {name: elements}`, read as the flat keys of the same names but
-- without the stage checks (a DeepSpeed config may carry sizes its stage
-- does not use, and DeepSpeed ignores them too).
local BUCKETS = { reduce_bucket_size = 1, allgather_bucket_size = 1,
  stage3_prefetch_bucket_size = 1, stage3_param_persistence_threshold = 1,
  stage3_max_live_parameters = 1, stage3_max_reuse_distance = 1, sub_group_size = 1,
  overlap_comm = 1, contiguous_gradients = 1 }

local function one_of(rd, key, list, default)
  local v = rd:raw(key)
  if v == nil then return default end
  for _, x in ipairs(list) do if x == v then return v end end
  local hint = type(v) == "string" and errors.suggest(v, list)
  rd:fail(key, ("must be one of %s, got '%s'%s"):format(table.concat(list, ", "), tostring(v),
    hint and ("; did you mean '" .. hint .. "'?") or ""))
end

-- The `parallel:` table of a spec, checked and with defaults; nil when absent.
-- run: the normalized run (for grad_accum and mode).
function M.read(tbl, where, run)
  if tbl == nil then return nil end
  errors.keys(tbl, KEYS, where, "parallel.")
  local given, lenient = tbl, {}
  if tbl.buckets ~= nil then
    errors.keys(tbl.buckets, BUCKETS, where, "parallel.buckets.")
    local flat = {}
    for k, v in pairs(tbl) do flat[k] = v end
    flat.buckets = nil
    for k, v in pairs(tbl.buckets) do
      if flat[k] == nil then flat[k], lenient[k] = v, true end
    end
    tbl = flat
  end
  local rd = cfgutil.reader(tbl, where, "parallel.")
  local D = M.DEFAULTS
  local tp, pp, cp = rd:int("tp", 1), rd:int("pp", 1), rd:int("cp", 1)
  -- dp: the data-parallel degree; or HSDP's dp_replicate x dp_shard; or
  -- what world_size leaves after tp x pp x cp
  local dp = rd:int("dp", nil, true)
  local shard_size = rd:int("dp_shard", nil, true)
  if shard_size or tbl.dp_replicate then
    if dp then rd:fail("dp", "give dp or dp_replicate x dp_shard, not both") end
    dp = rd:int("dp_replicate", 1) * (shard_size or 1)
  end
  local world = rd:int("world_size", nil, true)
  if world then
    if world % (tp * pp * cp) ~= 0 then
      rd:fail("world_size", ("%d is not a multiple of tp x pp x cp (%d)"):format(world,
        tp * pp * cp))
    end
    if dp and dp * tp * pp * cp ~= world then
      rd:fail("world_size", ("%d differs from dp x tp x pp x cp (%d)"):format(world,
        dp * tp * pp * cp))
    end
    dp = world // (tp * pp * cp)
  end
  local L = {
    dp = dp or 1, tp = tp, pp = pp, cp = cp,
    ep = rd:int("ep", 1),
    sp = rd:bool("sequence_parallel", false),
    schedule = one_of(rd, "pp_schedule", M.SCHEDULES, "1f1b"),
    zero = rd:int("zero", 0, false, 0),
    fsdp = one_of(rd, "fsdp", M.FSDP, nil),
    fsdp_version = rd:int("fsdp_version", 1),
    gpus_per_node = rd:int("gpus_per_node", D.gpus_per_node),
    bucket_cap_mb = rd:int("bucket_cap_mb", D.bucket_cap_mb),
    bucket_view = rd:bool("gradient_as_bucket_view", false),
    reduce_bucket = rd:int("reduce_bucket_size", D.reduce_bucket_size),
    allgather_bucket = rd:int("allgather_bucket_size", D.allgather_bucket_size),
    contiguous_gradients = rd:bool("contiguous_gradients", true),
    prefetch_bucket = rd:int("stage3_prefetch_bucket_size", D.stage3_prefetch_bucket_size, false, 0),
    max_live = rd:int("stage3_max_live_parameters", D.stage3_max_live_parameters),
    persistence = rd:int("stage3_param_persistence_threshold",
      D.stage3_param_persistence_threshold, false, 0),
    sub_group = rd:int("sub_group_size", D.sub_group_size),
    limit_all_gathers = rd:bool("limit_all_gathers", true),
  }
  if L.zero > 3 then rd:fail("zero", "must be 0, 1, 2 or 3, got " .. L.zero) end
  if L.fsdp_version > 2 then rd:fail("fsdp_version", "must be 1 or 2, got " .. L.fsdp_version) end
  if L.fsdp and L.zero > 0 then rd:fail("fsdp", "cannot be combined with zero (pick one)") end
  if tbl.fsdp_version and not L.fsdp then rd:fail("fsdp_version", "needs fsdp") end
  L.overlap_comm = rd:bool("overlap_comm", L.zero == 3) -- DeepSpeed: on by default in stage 3
  L.reshard = rd:bool("reshard_after_forward", L.fsdp ~= "shard_grad_op")
  if tbl.reshard_after_forward ~= nil and not L.fsdp then
    rd:fail("reshard_after_forward", "is an FSDP knob: needs fsdp")
  end
  if L.fsdp == "shard_grad_op" and L.reshard then
    rd:fail("reshard_after_forward", "shard_grad_op keeps parameters unsharded after forward")
  end
  for _, k in ipairs({ "reduce_bucket_size", "allgather_bucket_size", "overlap_comm",
    "contiguous_gradients", "sub_group_size" }) do
    if tbl[k] ~= nil and L.zero == 0 and not lenient[k] then
      rd:fail(k, "is a DeepSpeed ZeRO knob: needs zero >= 1")
    end
  end
  for _, k in ipairs({ "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
    "stage3_param_persistence_threshold", "stage3_max_reuse_distance" }) do
    if tbl[k] ~= nil and L.zero ~= 3 and not lenient[k] then
      rd:fail(k, "is a ZeRO-3 knob: needs zero: 3")
    end
  end
  -- parameters released and fetched again vs. kept for reuse: the steady
  -- gathered window below does not depend on it
  L.reuse_distance = rd:int("stage3_max_reuse_distance", nil, true, 0)
  if (tbl.bucket_cap_mb ~= nil or tbl.gradient_as_bucket_view ~= nil)
      and (L.zero > 0 or (L.fsdp and L.fsdp ~= "no_shard")) then
    rd:fail(tbl.bucket_cap_mb ~= nil and "bucket_cap_mb" or "gradient_as_bucket_view",
      "is a DDP knob: ZeRO and sharded FSDP reduce gradients their own way")
  end
  if L.sp and L.tp == 1 then rd:fail("sequence_parallel", "needs tp > 1") end
  if L.schedule == "interleaved" then
    if L.pp == 1 then rd:fail("pp_schedule", "interleaved needs pp > 1") end
    L.vstages = rd:int("virtual_stages", 2)
  else
    if tbl.virtual_stages ~= nil then rd:fail("virtual_stages", "needs pp_schedule: interleaved") end
    L.vstages = 1
  end
  L.microbatches = rd:int("microbatches", run and run.grad_accum or 1)
  local off = tbl.offload or {}
  errors.keys(off, { optimizer = 1, params = 1, pin_memory = 1 }, where, "parallel.offload.")
  local ord = cfgutil.reader(off, where, "parallel.offload.")
  L.offload = { optimizer = one_of(ord, "optimizer", M.OFFLOAD, "none"),
    params = one_of(ord, "params", M.OFFLOAD, "none"), pin = ord:bool("pin_memory", true) }
  if L.offload.params ~= "none" and L.zero ~= 3 and not (L.fsdp and L.fsdp ~= "no_shard") then
    ord:fail("params", "parameter offload needs zero: 3 or a sharded fsdp")
  end
  if L.offload.optimizer ~= "none" and L.zero == 0 and not L.fsdp then
    ord:fail("optimizer", "optimizer offload needs zero >= 1 or fsdp")
  end
  if L.fsdp then
    if L.offload.optimizer == "nvme" or L.offload.params == "nvme" then
      ord:fail("params", "FSDP offloads to cpu only")
    end
    -- FSDP's CPUOffload(offload_params=True) moves parameters, gradients and
    -- the optimizer step to the host together
    if L.offload.optimizer ~= L.offload.params then
      ord:fail("optimizer", "FSDP offloads parameters and optimizer together: set both to cpu")
    end
  end
  L.world = L.dp * L.tp * L.pp * L.cp
  if L.dp % L.ep ~= 0 then rd:fail("ep", ("must divide dp (%d), got %d"):format(L.dp, L.ep)) end
  -- ZeRO and FSDP shard over the data-parallel ranks (with cp, the same
  -- parameters live on dp*cp ranks); hybrid_shard within a node
  L.shard = L.dp * L.cp
  if shard_size then
    if not L.fsdp then rd:fail("dp_shard", "needs fsdp (HSDP shards over dp_shard ranks)") end
    L.shard = shard_size * L.cp
  elseif L.fsdp == "hybrid_shard" then
    local per_node = math.max(1, L.gpus_per_node // (L.tp * L.pp))
    L.shard = math.min(L.shard, per_node)
    if (L.dp * L.cp) % L.shard ~= 0 then
      rd:fail("gpus_per_node", "hybrid_shard's shard group must divide dp*cp")
    end
  end
  L.where = where
  L._spec = given -- as written: `fit --knobs` edits it and reads it again
  return L
end

-- Model-dependent checks, once the model is known.
function M.check(L, run, where)
  -- field: the parallel: key at fault, or "" for the layout as a whole
  local function fail(field, what)
    errors.input(where, field == "" and "parallel" or "parallel." .. field, what)
  end
  if run.vision or run.vlm or not run.text then -- a text-only decoder on the simulator
    fail("", "per-rank budgets are modelled for decoder-only language models")
  end
  if run.mode ~= "train" or run.rl then fail("", "per-rank budgets are modelled for training steps") end
  if run.quant then fail("", "quantized weights are not modelled with parallel layouts") end
  if run.ckpt_every or run.ckpt_segment then
    fail("", "every-N-th / segment checkpointing is not modelled with parallel layouts")
  end
  local m = run.text
  local tp = L.tp
  if m.heads % tp ~= 0 then fail("tp", ("must divide num_attention_heads (%d)"):format(m.heads)) end
  if m.kv_heads % tp ~= 0 and tp % m.kv_heads ~= 0 then
    fail("tp", ("must divide or be a multiple of num_key_value_heads (%d)"):format(m.kv_heads))
  end
  if m.intermediate % tp ~= 0 then
    fail("tp", ("must divide intermediate_size (%d)"):format(m.intermediate))
  end
  local chunks = L.pp * L.vstages
  if m.layers % chunks ~= 0 then
    fail("pp", ("pp x virtual_stages (%d) must divide num_hidden_layers (%d)"):format(chunks,
      m.layers))
  end
  if L.pp > 1 and m.factor then fail("pp", "factorized embeddings are not modelled with pp") end
  if L.cp > 1 then
    if run.attention == "eager" then
      fail("cp", "context parallelism (ring attention) needs run.attention sdpa or flash")
    end
    -- load-balanced ring attention splits the sequence into 2*cp chunks
    if run.seq % (2 * L.cp) ~= 0 then
      fail("cp", ("2*cp must divide run.seq (%d)"):format(run.seq))
    end
  end
  if L.sp and (run.batch * run.seq // L.cp) % tp ~= 0 then
    fail("sequence_parallel", "tp must divide the tokens of a micro-batch")
  end
  local experts = m.moe and m.moe.experts
  if L.ep > 1 then
    if not experts then fail("ep", "expert parallelism needs a mixture-of-experts model") end
    if experts % L.ep ~= 0 then
      fail("ep", ("must divide the expert count (%d), got %d"):format(experts, L.ep))
    end
    if L.fsdp then fail("ep", "expert parallelism with FSDP is not modelled") end
    if run.moe and run.moe.impl and run.moe.impl ~= "grouped" then
      fail("ep", "expert parallelism is modelled with run.moe.impl: grouped (all-to-all, "
        .. "grouped GEMM)")
    end
  end
  if L.pp > 1 and L.microbatches < 1 then fail("microbatches", "must be >= 1") end
  return L
end

local copy, with = require("stdlib.run").copy, require("stdlib.run").with
local shallow = require("stdlib.run").shallow

local function ceil_div(a, b) return (a + b - 1) // b end

-- Megatron pads the vocabulary to a multiple of 128 x tp
-- (make_vocab_size_divisible_by) so that each rank's slice is equal.
function M.padded_vocab(v, tp)
  if tp == 1 then return v end
  return ceil_div(v, 128 * tp) * 128 * tp
end

-- Pipeline roles: one per stage, with the micro-batches (model chunks, when
-- interleaved) whose activations it holds at its peak.
function M.roles(L, run)
  local p, v, m = L.pp, L.vstages, L.microbatches
  local per = L.dp * L.tp * L.cp
  local out = {}
  for s = 0, p - 1 do
    local inflight
    if v == 1 then
      inflight = math.min(p - s, m) -- 1F1B: warm-up forwards plus the one in backward
    else
      -- Megatron's interleaved warm-up: (p - s - 1)*2 + (v - 1)*p chunks, plus one
      inflight = math.min((p - s - 1) * 2 + (v - 1) * p + 1, m * v)
    end
    out[#out + 1] = { stage = s, first = s == 0, last = s == p - 1, inflight = inflight,
      layers = run.text.layers // p, chunk_layers = run.text.layers // (p * v),
      ranks = { s * per, (s + 1) * per - 1 } }
  end
  return out
end

-- The run one rank of `role` simulates: its share of the model and tokens.
-- A shallow copy with its own text (and moe under ep): nothing a pass calls
-- edits a run's tables, and a search makes one per role of each layout (a
-- deep copy was most of this function's cost, and tables shared with the
-- search's run compare at once in measure_key's run.key).
function M.local_run(run, L, role)
  local m = run.text
  local t = shallow(m)
  local r = with(run, { text = t })
  t.head_dim = m.head_dim
  t.heads = m.heads // L.tp
  t.kv_heads = math.max(1, m.kv_heads // L.tp) -- tp > kv heads: each rank keeps one copy
  t.intermediate = m.intermediate // L.tp
  t.vocab = M.padded_vocab(m.vocab, L.tp) // L.tp
  t.layers = role.layers
  -- per-layer lists (MoE layers, attention kinds) for this stage's layers
  local first = role.stage * role.layers
  for k, v in pairs(m) do
    if type(v) == "table" and #v == m.layers and m.layers > role.layers then
      local sl = {}
      for i = 1, role.layers do sl[i] = v[first + i] end
      t[k] = sl
    end
  end
  if m.moe and L.ep > 1 then
    -- this rank's E/ep experts behind an all-to-all; the permute + grouped
    -- GEMM implementation (Megatron, torchtitan): HF's eager loop has no EP
    t.moe = copy(m.moe)
    t.moe.ep = L.ep
    r.moe = copy(r.moe or {})
    r.moe.impl = "grouped"
  end
  r.seq = run.seq // L.cp
  r.stage = { embed = role.first, head = role.last }
  local sharded = L.zero > 0 or (L.fsdp and L.fsdp ~= "no_shard")
  if sharded then
    -- the module computes in the compute dtype. DeepSpeed keeps fp32
    -- partitions (master, optimizer) behind a 16-bit module always; FSDP's
    -- shards keep the dtype the model was loaded in (fp32 under
    -- precision.master, else pure 16-bit)
    if L.zero > 0 and vram.bytes(r.dtype, 1) < 4 then
      r.master_dtype = "fp32"
    else
      r.master_dtype = r.param_dtype
    end
    r.param_dtype, r.autocast = r.dtype, nil
  end
  return r
end

-- What M.local_run reads of a layout and a role, and what it makes of the
-- run's dtypes, as a string (keep the two in step: tests/lua/test_parallel.lua
-- checks it): runs that are equal but for their layout and master_dtype make
-- rank-local runs that are equal but for master_dtype where these are equal.
-- M.budget remembers their measuring keys by it.
function M.local_inputs(run, L, role)
  local sharded = L.zero > 0 or (L.fsdp and L.fsdp ~= "no_shard")
  return table.concat({ L.tp, L.ep, L.cp, role.stage, role.layers, tostring(role.first),
    tostring(role.last), tostring(sharded and run.dtype or not sharded and run.param_dtype),
    tostring(sharded or run.autocast == nil) }, "|")
end

-- Parameter ids of each decoder layer (FSDP's per-layer wrapping units).
local function layer_param_ids(l, out)
  for _, v in pairs(l) do
    if type(v) == "table" then
      if v.param then out[v.id] = true else layer_param_ids(v, out) end
    end
  end
  return out
end

-- FSDP's wrapping units: the root (the parameters outside every decoder
-- layer: embedding, final norm, head), then one per layer, in order, as
-- { n, params = { {n, rows, copies} }, layers = consecutive layers it
-- stands for }; a parameter that several layers hold is the last one's.
-- params: S.params. Layers built as one group (stdlib/sim.lua: layer i is
-- copy i - 1 of the group, the tables of layers 2 .. n made only when read)
-- are read off layer 1's table, once for all.
local function fsdp_units(layers, params)
  local mt = getmetatable(layers)
  local G = mt and mt.group
  local grouped, found = G and G.count == #layers and #layers >= 2, false
  for _, p in ipairs(grouped and params or {}) do
    if p.group and p ~= G then grouped = false end
    found = found or p == G
  end
  grouped = grouped and found -- the layers' group, and no other
  local function unit() return { n = 0, params = {}, layers = 1 } end
  local function add(u, p, copies)
    u.n = u.n + p.n * copies
    u.params[#u.params + 1] = { n = p.n, rows = p.rows, copies = copies }
  end
  local root = unit()
  if not grouped then
    local units, in_unit = {}, {}
    for i, l in ipairs(layers) do
      units[i] = unit()
      for id in pairs(layer_param_ids(l, {})) do in_unit[id] = i end
    end
    for _, p in ipairs(Sim.expand(params)) do -- every layer's own parameter tables
      add(in_unit[p.id] and units[in_unit[p.id]] or root, p, 1)
    end
    table.insert(units, 1, root)
    return units
  end
  -- layer 1 holds copy 0 of the group's parameters (layer i copy i - 1) and
  -- every parameter shared by the layers (then the last layer's)
  local held = layer_param_ids(rawget(layers, 1), {})
  local each, last = unit(), unit()
  for _, p in ipairs(params) do
    if p == G then
      for _, q in ipairs(G.params) do
        if held[q.id] then add(each, q, 1) else add(root, q, G.count) end
      end
    elseif held[p.id] then
      add(last, p, 1)
    else
      add(root, p, 1)
    end
  end
  each.layers = G.count - 1
  for _, q in ipairs(each.params) do add(last, q, 1) end
  return { root, each, last }
end

-- Bytes of n elements of dt, without allocator rounding.
local function nbytes(dt, n) return vram.bytes(dt, n) end

-- How the data-parallel ranks keep the model states: ddp, zero1-3, fsdp.
local function scheme_of(L)
  return L.fsdp and L.fsdp ~= "no_shard" and "fsdp" or
    (L.zero > 0 and ("zero" .. L.zero) or "ddp")
end
-- Whether the parameters the family builds hold their bytes on the tape.
local function params_on_tape(scheme) return scheme == "ddp" or scheme == "zero1" end

-- f(p, copies) for each parameter of a list with groups (stdlib/sim.lua),
-- once for all the identical copies it stands for.
local function each_param(list, f)
  for _, p in ipairs(list) do
    if p.group then
      for _, q in ipairs(p.params) do f(q, p.count) end
    else
      f(p, 1)
    end
  end
end

-- Under a compiled estimate's probe (run.trace: stdlib/compiled_parallel.lua)
-- tensors count exact bytes and the program rounds each change as the run's
-- allocator would. The layout's own buffers are sums and multiples of
-- rounded sizes, so a probe rounds them first, to the run's block: the
-- block (nil outside a probe), and bytes(dt, n) and the bytes of a list's
-- parameters (Sim.sum) as the run's allocator counts them.
local function probe_block(run)
  if not run.trace then return nil end
  local a = frameworks.get(run.kernels_of or run.framework).allocator
  return a and a.round or nil
end

local function sizer(S, block)
  if not block then return function(dt, n) return S:bytes(dt, n) end end
  return function(dt, n) return vram.round_up(nbytes(dt, n), block) end
end

local function sum_bytes(list, block)
  if not block then return Sim.sum(list, "b") end
  local s = 0
  each_param(list, function(p, c) s = s + vram.round_up(p.b, block) * c end)
  return s
end

-- How pass runs a step's layout allocations and its forward and backward
-- segments. Run: on the tape, each segment's window recorded when `rec`
-- (a table) is given. Replay: from such a record (lean searches, M.search):
-- the layout's own allocations go on the tape (for their reserved blocks)
-- and are followed here, the segments are the recorded windows; the tape's
-- live and reserved bytes are sums over the tensors alive (each rounded on
-- its own), so a segment that allocates and frees the same tensors from a
-- higher or lower start moves its peaks by that difference, at the same
-- moment. The peaks are kept as the tape keeps them: live's first highest
-- moment (with its categories), reserved's highest.
local Run, Replay = {}, setmetatable({}, { __index = spans.Peaks })
Run.__index, Replay.__index = Run, Replay
function Run:alloc(bytes, cat, label) return self.tape:alloc(bytes, cat, label) end
function Run:drop(id) self.tape:drop(id) end
function Run:temp(bytes, cat, label) self.tape:temp(bytes, cat, label) end
function Run:phase(name) self.tape:phase(name) end
function Run:measured(f) f() end
function Run:segment(kind, mb, f)
  if not self.rec then return f() end
  local c0 = self.tape:live_by_category()
  self.tape:window()
  local a, b = f()
  self.rec[kind .. mb] = spans.delta(self.tape, c0)
  return a, b
end

-- rec.built: the recorded pass's tape as its model was built; this tape
-- holds what came after (states, inputs, from nothing), above that.
local function replay(tape, rec)
  local b, st = rec.built, tape:stats()
  local live, reserved = tape:live()
  local T = setmetatable({ tape = tape, rec = rec, replayed = true, live = b.live + live,
    reserved = b.reserved + reserved, cats = {}, peak = b.peak, rpeak = b.rpeak,
    at = b.at }, Replay)
  local now = tape:live_by_category()
  for k, v in pairs(b.cats) do T.cats[k] = v + now[k] end
  if b.live + st.peak > T.peak then
    T.peak, T.at = b.live + st.peak, {}
    for k, v in pairs(b.cats) do T.at[k] = v + st.at_peak[k] end
  end
  if b.reserved + st.peak_reserved > T.rpeak then T.rpeak = b.reserved + st.peak_reserved end
  return T
end
function Replay:alloc(bytes, cat, label)
  local l0, r0 = self.tape:live()
  local id = self.tape:alloc(bytes, cat, label)
  local l1, r1 = self.tape:live()
  local h = { id = id, live = l1 - l0, reserved = r1 - r0, cat = cat }
  self:add(h)
  self:moment(0, 0)
  return h
end
function Replay:drop(h)
  self.tape:drop(h.id)
  self:add({ live = -h.live, reserved = -h.reserved, cat = h.cat })
end
function Replay:temp(bytes, cat, label) self:drop(self:alloc(bytes, cat, label)) end
function Replay:phase() end
function Replay:segment(kind, mb) self:window(self.rec[kind .. mb]) end
function Replay:measured(f) -- on the tape itself (the optimizer step), measured
  local c0 = self.tape:live_by_category()
  self.tape:window()
  f()
  self:window(spans.delta(self.tape, c0))
end

-- A pass's name for the layers kept across the simulations of a search
-- (stdlib/compose.lua M.keeping): what its layers read. The rank-local run
-- written out against the search's run, less what no layer reads (the
-- loss, the optimizer: step.UNREAD_BY_LAYERS; the layout itself, the
-- master dtype, which end of the model the stage holds) and with its text
-- model as a layer reads it (layer_text), and what the pass sets apart
-- from the run: whether parameters hold their bytes (their gradient edges
-- carry them), the sequence-parallel split, an interleaved stage's chunk
-- (whose layers are walked, never kept). Passes of any role, layout, stage
-- count or micro-batch count that agree on it walk their layers alike on
-- alike inputs: a stage's first layer reads the embedding, a later stage's
-- the activation it received, which compose.layers tells apart.
local LAYERS_SKIP = { parallel = true, master_dtype = true, stage = true }
for k in pairs(step.UNREAD_BY_LAYERS) do LAYERS_SKIP[k] = true end

-- A stage's text model as one of its layers reads it: the stage's layer
-- count left out (a layer reads its own index's entries), and each
-- per-layer list whose entries are all the same value written as that
-- value (a stack kept across passes is a uniform one, models/decoder.lua,
-- which reads the same at every index); a list that differs from layer to
-- layer stays as the stage's slice.
local function layer_text(m)
  local t = shallow(m)
  t.layers = nil
  for k, v in pairs(m) do
    if type(v) == "table" and #v == m.layers and m.layers > 0 then
      local same = true
      for i = 2, #v do
        if v[i] ~= v[1] then same = false break end
      end
      if same then t[k] = { every_layer = v[1] } end
    end
  end
  return t
end

local function layers_identity(lrun, L, base, mid)
  return table.concat({ run_key(with(lrun, { text = layer_text(lrun.text) }), base, LAYERS_SKIP),
    tostring(params_on_tape(scheme_of(L))), tostring(L.sp), L.tp, L.vstages, mid and "mid" or "" },
    "|")
end

-- One pass of the role's step on S, a fresh simulator (pass below). held: bytes one
-- micro-batch's forward leaves held, or a function giving them, asked only
-- once the step is not cut off (nil on the measuring pass). cutoff
-- (optional): function(live, reserved) true when a rank holding that much
-- cannot be listed; asked once the model states and inputs are allocated,
-- after each forward and each backward (every peak is at least what is live
-- at any moment), it ends the pass (nil). mid: the
-- measuring pass of an interleaved stage runs a chunk from the middle of
-- the model (neither embedding nor head): most chunks in flight are such.
-- lean (optional, a step's pass under a lean search): { rec = a record of
-- a pass with the same forward and backward (simulate's key) } to replay,
-- or { } to run and record (lean.made, once the pass is complete).
local function run_pass(S, family, run, L, role, held, mid, cutoff, lean)
  if run.timeline and held then S.tape:timeline(true) end -- the step's pass, drawn
  if L.sp then
    -- row-parallel outputs and the embedding are reduce-scattered over tp;
    -- the norms' per-row statistics follow their rows
    S.split = { o_proj = L.tp, down_proj = L.tp, embed_tokens = L.tp }
    for _, n in ipairs({ "input_layernorm", "post_attention_layernorm", "norm" }) do
      S.split[n .. ".mean"], S.split[n .. ".rsqrt"] = L.tp, L.tp
    end
  end
  local tape = S.tape
  local scheme = scheme_of(L)
  local block = probe_block(run)
  local B = sizer(S, block) -- the layout's own buffers (probe_block above)
  -- a lean search: replayed, the recorded pass's model (its tape as built
  -- follows, Replay); recording, this one's
  local rec = lean and lean.rec or (lean and {})
  local built = lean and lean.rec and rec.built
  local P
  if built then
    P, S.params = built.P, built.params
  else
    -- sharded schemes: states allocated below, partitioned; the handles
    -- carry no bytes
    S:set_param_storage(params_on_tape(scheme))
    -- shared by the runs of a search (stdlib/shared_setup.lua) under the
    -- pass's stage and chunk (the layout, and with it the parameters'
    -- storage, is the run's)
    P = step.built(S, family, run, function() return family.build(S, run, step.policies(run)) end,
      "pass|" .. role.stage .. "|" .. tostring(mid))
    S:set_param_storage(true)
    if rec then
      local st, live, reserved = tape:stats(), tape:live()
      rec.built = { P = P, params = S.params, live = live, reserved = reserved,
        cats = tape:live_by_category(), peak = st.peak, rpeak = st.peak_reserved,
        at = st.at_peak }
    end
  end
  -- identical layers' parameters are one group (stdlib/sim.lua): each of
  -- its parameters is read once, for all its copies (each_param)
  local params = S.params
  -- expert parameters (EP): ZeRO partitions them over the dp/ep ranks that
  -- hold the same experts. The layers made so far: one not made yet is a
  -- copy of a group's first layer, whose parameters are the group's
  local layers = P.layers or {}
  for i = 1, #layers do
    local b = rawget(layers, i)
    b = b and b.moe
    if b then
      for _, k in ipairs({ "gate_up", "down", "gate_up_b", "down_b" }) do
        if b[k] then b[k].expert = true end
      end
    end
  end
  local cdt = run.param_dtype -- what the module computes with (and its grads)
  local mdt = run.master_dtype or cdt
  local N = L.shard
  local Ne = N // L.ep -- the group an expert's replicas form
  local function group(p) return p.expert and Ne or N end
  local info = { scheme = scheme, host = 0, nvme = 0, assumptions = {}, states = {} }
  local function assume(s) info.assumptions[#info.assumptions + 1] = s end
  local states = info.states
  local function add_state(k, b) states[k] = (states[k] or 0) + b end
  local total, trainable, largest, expert_tr = 0, 0, 0, 0
  each_param(params, function(p, c)
    total = total + p.n * c
    if p.rg then trainable = trainable + p.n * c end
    if p.rg and p.expert then expert_tr = expert_tr + p.n * c end
    if p.n > largest then largest = p.n end
  end)
  info.param_count, info.trainable_count, info.largest_param = total, trainable, largest
  local opt = copy(run.optimizer)
  local function state_params(parts, dt)
    local out = {}
    for _, n in ipairs(parts) do
      if n > 0 then out[#out + 1] = { n = n, rows = n, dt = dt, b = S:bytes(dt, n) } end
    end
    return out
  end
  local function state_bytes(n, dt)
    if opt.name == "none" or opt.name == "sgd" then return 0 end
    return vram.optimizer_state(opt.name == "sgd_momentum" and "momentum" or opt.name, n, 1,
      opt.state_dtype or dt, opt.momentum_dtype)
  end
  -- where the optimizer's partitions live: GPU, host or NVMe
  local off = L.offload
  local opt_parts -- pseudo-parameters the GPU optimizer steps over (nil: host)
  local fwd_window, bwd_window = 0, 0 -- transient gathered params (+ grads)
  local bwd_buffers, opt_transient = 0, 0
  if scheme == "ddp" then
    each_param(params, function(p, c)
      add_state("weights", nbytes(p.dt, p.n) * c)
      if p.rg then add_state("gradients", nbytes(p.dt, p.n) * c) end
    end)
    local tr = step.trainable(S, params)
    optim.init_state(S, tr, opt)
    each_param(tr, function(p, c) add_state("optimizer_state", state_bytes(p.n, p.dt) * c) end)
    if L.dp * L.cp > 1 and not L.bucket_view and L.fsdp ~= "no_shard" then
      -- the reducer's flat buckets span every gradient once more
      tape:alloc(sum_bytes(tr, block), "buffers", "ddp.buckets")
      assume(("DDP buckets: a second copy of the gradients (%d MB cap per bucket; "
        .. "gradient_as_bucket_view=false)"):format(L.bucket_cap_mb))
    end
    opt_parts = tr
  elseif scheme == "zero1" or scheme == "zero2" or scheme == "zero3" then
    -- fp32 (master dtype) partitions of the trainable parameters. Stages 1
    -- and 2 flatten each group, padded to 2 x world elements
    -- (nccl_start_alignment_factor); stage 3 pads every parameter to world.
    local part = 0
    if scheme == "zero3" then
      each_param(params, function(p, c)
        if p.rg then part = part + ceil_div(p.n, group(p)) * c end
      end)
    else
      part = ceil_div(trainable - expert_tr, 2 * N) * 2
      if expert_tr > 0 then part = part + ceil_div(expert_tr, 2 * Ne) * 2 end
    end
    info.partition = part
    local master = mdt ~= cdt and mdt or nil
    local host_opt = off.optimizer ~= "none"
    local opt_bytes = state_bytes(part, mdt)
    local master_b = master and nbytes(master, part) or 0
    local fp32_grad = nbytes(mdt, part) -- the partition's gradient the optimizer reads
    if scheme == "zero3" then fp32_grad = nbytes(mdt, math.min(part, L.sub_group)) end
    if host_opt then
      local hb = opt_bytes + master_b + fp32_grad
      if off.optimizer == "cpu" then
        info.host = info.host + hb
      else
        info.nvme = info.nvme + opt_bytes + master_b
        local staged = M.DEFAULTS.nvme_optimizer_buffer_count * math.min(part, L.sub_group) * 4
        info.host = info.host + staged + fp32_grad
        assume("NVMe optimizer swap: 4 pinned staging buffers of one sub-group (DeepSpeed "
          .. "aio defaults, assumed)")
      end
    else
      if master then
        tape:alloc(B(master, part), "master_weights", "zero.fp32_partition")
        add_state("master_weights", master_b)
      end
      optim.init_state(S, state_params({ part }, mdt), opt)
      add_state("optimizer_state", opt_bytes)
      opt_transient = B(mdt, scheme == "zero3" and math.min(part, L.sub_group) or part)
      add_state("fp32_grad_partition", fp32_grad)
      opt_parts = nil -- FusedAdam updates in place: no step temporaries
      assume("ZeRO optimizer: fused Adam over flat partitions, no step temporaries")
    end
    -- the 16-bit parameters
    if scheme == "zero3" then
      local resident = 0
      each_param(params, function(p, c)
        resident = resident + (p.n < L.persistence and p.n or ceil_div(p.n, group(p))) * c
      end)
      if off.params == "none" then
        tape:alloc(B(cdt, resident), "weights", "zero3.param_partitions")
      elseif off.params == "cpu" then
        info.host = info.host + nbytes(cdt, resident)
      else
        info.nvme = info.nvme + nbytes(cdt, resident)
        info.host = info.host + M.DEFAULTS.nvme_param_buffer_count
          * M.DEFAULTS.nvme_param_buffer_size * vram.bytes(cdt, 1)
        assume("NVMe parameter swap: 5 pinned buffers of 1e8 elements (DeepSpeed defaults)")
      end
      if off.params == "none" then add_state("weights", nbytes(cdt, resident)) end
      -- gradients reduce-scattered into a flat 16-bit partition buffer
      -- (offloaded: straight into pinned host buffers)
      if not host_opt then
        tape:alloc(B(cdt, part), "gradients", "zero3.grad_partitions")
        add_state("gradients", nbytes(cdt, part))
      end -- offloaded: reduced straight into the host fp32 gradient buffer
      -- gathered window: the module in use plus the prefetch bucket, capped
      -- by stage3_max_live_parameters
      local win = math.min(largest + L.prefetch_bucket, math.max(L.max_live, largest), total)
      fwd_window = B(cdt, win)
      bwd_window = fwd_window + B(cdt, largest) -- + the module's full gradient
      bwd_buffers = B(cdt, math.min(L.reduce_bucket, trainable))
      add_state("largest_layer_params_and_grads", nbytes(cdt, largest) * 2)
      assume(("ZeRO-3 gathered window: largest module (%d) + prefetch bucket, "
        .. "steady state over the whole forward/backward"):format(largest))
    else
      local full = total
      if scheme == "zero2" then
        tape:alloc(B(cdt, full), "weights", "zero.bit16_params")
        -- gradients land in the bucket, then in this rank's partition
        local ipg = L.contiguous_gradients and
          B(cdt, math.min(L.reduce_bucket, trainable)) * (L.overlap_comm and 2 or 1) or 0
        bwd_buffers = ipg
        if not host_opt then -- offloaded: copied into pinned host buffers instead
          info.grad_partition = B(cdt, part)
          add_state("gradients", nbytes(cdt, part))
        end
      else
        -- ZeRO-1: full gradients until the step, reduced in buckets
        each_param(params, function(p, c)
          if p.rg then add_state("gradients", nbytes(cdt, p.n) * c) end
        end)
        bwd_buffers = 0
        info.reduce_tail = B(cdt, math.min(L.reduce_bucket, trainable))
      end
      add_state("weights", nbytes(cdt, full))
    end
  else -- fsdp
    local shard_parts = {}
    local shard_total, unit_max = 0, 0
    local root
    for k, u in ipairs(fsdp_units(P.layers or {}, params)) do
      local s = 0
      if L.fsdp_version == 1 then
        s = ceil_div(u.n, N) -- one FlatParameter per unit, padded to the world
      else
        for _, p in ipairs(u.params) do
          local rows = p.rows or p.n
          s = s + ceil_div(rows, N) * (p.n // rows) * p.copies -- DTensor Shard(0), dim 0 padded
        end
      end
      for _ = 1, u.layers do shard_parts[#shard_parts + 1] = s end
      shard_total = shard_total + s * u.layers
      if k == 1 then root = u elseif u.n > unit_max then unit_max = u.n end
    end
    info.partition = shard_total
    local sdt = mdt -- sharded parameters keep the loaded dtype
    local host = off.params == "cpu"
    local opt_bytes = state_bytes(shard_total, sdt)
    if host then
      info.host = info.host + nbytes(sdt, shard_total) * 2 + opt_bytes
    else
      for i, s in ipairs(shard_parts) do
        tape:alloc(B(sdt, s), sdt ~= cdt and "master_weights" or "weights",
          "fsdp.shard" .. (i == 1 and ".root" or ""))
      end
      add_state(sdt ~= cdt and "master_weights" or "weights", nbytes(sdt, shard_total))
      optim.init_state(S, state_params(shard_parts, sdt), opt)
      add_state("optimizer_state", opt_bytes)
      add_state("gradients", nbytes(sdt, shard_total))
      opt_parts = state_params(shard_parts, sdt)
      info.grad_shards = shard_parts
      info.grad_dt = sdt
    end
    -- unsharded compute-dtype copies: the root unit (embedding, norm, head)
    -- stays gathered through the step; layer units are gathered in turn
    local ubytes = B(cdt, unit_max)
    if sdt ~= cdt or N > 1 then
      tape:alloc(B(cdt, root.n), "weights", "fsdp.root_unsharded")
    end
    if L.reshard then
      fwd_window = 2 * ubytes -- current unit + the one prefetched (rate limiter)
      if not L.limit_all_gathers then
        assume("limit_all_gathers=false: all-gathers may run further ahead; counted as two "
          .. "units (a lower bound)")
      end
    else
      fwd_window = B(cdt, total - root.n) -- every unit stays gathered until backward
    end
    bwd_window = 2 * ubytes + ubytes -- current + prefetched unit, the current unit's grads
    if not L.reshard then bwd_window = fwd_window + ubytes end
    bwd_buffers = B(cdt, ceil_div(unit_max, N)) -- reduce-scatter output
    add_state("unsharded_unit", nbytes(cdt, unit_max))
    assume("FSDP units: one per decoder layer plus the root (embedding, final norm, head)")
  end

  -- the step
  local inputs = family.inputs(S, run, P)
  local base, base_reserved = tape:live()
  if built then base, base_reserved = base + built.live, base_reserved + built.reserved end
  if cutoff and cutoff(base, base_reserved) then return nil end
  if type(held) == "function" then held = held() end
  local st_ends = { baseline = base }
  local rows = run.batch * run.seq
  local hidden_b = S:bytes(cdt, rows * run.text.hidden // (L.sp and L.tp or 1))
  -- a later stage's input: an activation received from the previous stage
  -- that requires grad (a zero-byte leaf stands for the sender's graph)
  local function recv()
    if role.first and not mid then return nil end
    local src = { id = tape:param(0, "activations", "pp.recv_src"), n = 0, b = 0, dt = cdt,
      rg = true, param = true }
    return S:op("pp.recv", rows * run.text.hidden // (L.sp and L.tp or 1), cdt, { src }, {},
      { { src, 0 } })
  end
  local chunk = P
  if L.vstages > 1 then
    local m = copy(P.m)
    m.layers = role.chunk_layers
    local ls = {}
    for i = 1, role.chunk_layers do ls[i] = P.layers[i] end
    chunk = setmetatable({ m = m, layers = ls }, { __index = P })
    if mid then chunk.head, chunk.norm = false, false end
  end
  local sends = not role.last or (mid and true)
  local n_mb = held and math.min(L.microbatches, 2) or 1
  -- ring attention (cp > 1): while one K/V block is used the next arrives,
  -- two buffers of this rank's K and V (backward: K, V, dK and dV); a
  -- steady window over the pass, as the step re-sends them every layer
  local ring = 0
  if L.cp > 1 then
    S:sized("ring attention's K/V buffers (cp > 1) are 4 x a rounded size, and seq is split "
      .. "over cp")
    local m = run.text
    ring = 2 * 2 * S:bytes(cdt, run.batch * run.seq * m.kv_heads * m.head_dim)
    info.assumptions[#info.assumptions + 1] = "ring attention: double-buffered K/V blocks "
      .. "(forward) and K/V/dK/dV blocks (backward) in flight, a steady window"
  end
  -- the layout's allocations and the segments (Run, Replay above)
  local X = built and replay(tape, rec) or setmetatable({ tape = tape, rec = rec }, Run)
  local held_block
  if held and held > 0 and role.inflight > 1 then
    local label = ("pp.in_flight x%d"):format(role.inflight - 1)
    if block then -- a probe: the held bytes are the program's input 1
      tape:trace_input(1, role.inflight - 1, "activations", label)
      held_block = label
    else
      held_block = X:alloc(held * (role.inflight - 1), "activations", label)
    end
  end
  local fw = fwd_window > 0 and X:alloc(fwd_window, "weights", "gathered_params.forward")
  for mb = 1, n_mb do
    X:phase("forward")
    if not fw and fwd_window > 0 then
      fw = X:alloc(fwd_window, "weights", "gathered_params.forward")
    end
    local rf = ring > 0 and X:alloc(ring, "buffers", "cp.ring_kv")
    -- a probe's measuring pass: the forward alone is traced (held below)
    if block and not held then tape:trace(run.batch, run.seq) end
    local before = tape:live()
    local root, cut = X:segment("forward", mb, function()
      if run.autocast then S:autocast_enter(run.autocast) end
      local r = recv()
      local out = family.forward_stage(S, chunk, run, r)
      if cutoff and cutoff(tape:live()) then return nil, true end -- the activations held
      S:autocast_exit()
      S:drop(r)
      if not sends then return out end
      -- the output is sent and freed (Megatron deallocates it); backward
      -- starts from the gradient the next stage sends back
      local sent = S:op("pp.send", 1, "fp32", { out }, {}, { { out, out.b } })
      S:drop(out)
      return sent
    end)
    if cut then return nil end
    if rec and not built and mb == 1 then -- what the measuring pass would find
      rec.held = rec.forward1.live - (sends and root.b or 0)
    end
    if not held then -- the measuring pass: nothing after this is read
      local sent = sends and root.b or 0
      if block then -- a probe: the forward's program, and the sent bytes as the run counts them
        return nil, { trace = tape:take_trace(), names = tape:names(),
          sent = vram.round_up(sent, block) }
      end
      return nil, { held = tape:live() - before - sent }
    end
    if rf then X:drop(rf) end
    st_ends.forward_end = st_ends.forward_end or tape:live()
    if L.reshard or scheme ~= "fsdp" then
      if fw then X:drop(fw); fw = nil end
    end
    X:phase("backward")
    local bw = bwd_window > 0 and X:alloc(bwd_window, "weights", "gathered_params.backward")
    local bb = bwd_buffers > 0 and X:alloc(bwd_buffers, "buffers", "grad_reduce_buckets")
    local rb = ring > 0 and X:alloc(2 * ring, "buffers", "cp.ring_kv_grads")
    if info.grad_partition and not info.gp_id then
      info.gp_id = X:alloc(info.grad_partition, "gradients", "zero2.grads_in_partition")
    end
    if info.grad_shards and not info.gs_ids then
      info.gs_ids = {}
      for i, s in ipairs(info.grad_shards) do
        info.gs_ids[i] = X:alloc(B(info.grad_dt, s), "gradients", "fsdp.grad_shard")
      end
    end
    cut = X:segment("backward", mb, function()
      tape:backward(root.id)
      if cutoff and cutoff(tape:live()) then return true end -- the gradients in place
      S:drop(root)
    end)
    if cut then return nil end
    if info.reduce_tail then X:temp(info.reduce_tail, "buffers", "zero1.reduce_bucket") end
    if bw then X:drop(bw) end
    if bb then X:drop(bb) end
    if rb then X:drop(rb) end
    if fw then X:drop(fw); fw = nil end
  end
  if block and held_block then
    tape:trace_input(1, 1 - role.inflight, "activations", held_block)
  elseif held_block then
    X:drop(held_block)
  end
  st_ends.backward_end = tape:live()
  X:phase("optimizer")
  if opt_transient > 0 then
    X:temp(opt_transient, "gradients", "zero.fp32_grad_partition")
  end
  if opt_parts then X:measured(function() optim.step(S, opt_parts, opt) end) end
  info.hidden_b = hidden_b
  if X.replayed then -- what is left only frees: the peaks are known
    return { peak = X.peak, peak_reserved = X.rpeak, at_peak = X.at, param_count = total,
      trainable_count = trainable }, info
  end
  st_ends.optimizer_end = tape:live()
  tape:phase("zero_grad")
  tape:zero_grad()
  if info.gp_id then tape:drop(info.gp_id) end
  for _, id in ipairs(info.gs_ids or {}) do tape:drop(id) end
  for _, x in ipairs(inputs) do S:drop(x) end
  local st = tape:stats()
  if block then st.trace, st.names = tape:take_trace(), tape:names() end -- a probe's program
  st.timeline = step.timeline(S)
  st.baseline, st.phase_end = base, st_ends
  st.param_count, st.trainable_count = total, trainable
  if lean then lean.made = rec end
  return st, info
end

-- The pass on a simulator of its own, whose tape goes to the next one
-- once the pass is over (step.new_sim's S.recycle): what the pass returns
-- holds no tape. identity (optional): layers_identity, under
-- compose.keeping.
local function pass(family, run, L, role, held, mid, cutoff, lean, identity)
  local S = step.new_sim(run, identity)
  local st, info = run_pass(S, family, run, L, role, held, mid, cutoff, lean)
  if S.recycle then S.tape:recycle() end
  return st, info
end

-- A search over many layouts or runs of one model (M.fit, stdlib/fit.lua)
-- reads only the largest rank's figures, and shares measurements:
--   local search = M.search(run, limit)  -- run: what every searched run is made from
--   M.budget(r, gpu_name, search)
-- Its keys are run.key strings against that run, so only runs made from it
-- (run.copy, then edited) may be priced under it. limit (optional, bytes):
-- a run whose largest rank needs more is of no use to the search, and
-- budget returns nil for it as soon as that is certain.
-- lean (optional): the search reads no budget's peak_phase, peak_op,
-- phase_peaks or timeline (fit --gpus, fit --knobs), so a role whose
-- forward and backward an earlier one ran (the same measuring key and
-- micro-batch count: layouts that differ in how the data-parallel ranks
-- keep the model states) is priced from that pass's record (Run, Replay
-- above): that pass's model and its tape as built, this layout's states and
-- allocations on a tape of their own, the recorded forward and backward
-- windows. Its peaks, reserved bytes, categories at the peak and device
-- total are the simulated ones. M.LEAN_SEARCH = false turns replays off
-- (tests/lib/compare.lua's walked compares with every pass run).
M.LEAN_SEARCH = true
function M.search(base, limit, lean)
  return { base = base, held = {}, limit = limit, lean = lean and M.LEAN_SEARCH,
    replays = {}, measured = {} }
end


-- What the measuring pass reads, as a string: the rank's run but its
-- master_dtype and its optimizer (read only by the states and the
-- optimizer's step, never between the forward's start and the backward's
-- end) and its layout (read by nothing the pass calls); whether parameters
-- hold their bytes on the tape; the splits and the chunk the forward runs.
-- States allocated before the forward (partitions, windows, ring buffers,
-- optimizer states) do not change what the forward adds to the live bytes,
-- nor what the backward does: a lean search replays one record for runs
-- that differ in their optimizer alone (fit --knobs' 8-bit AdamW, bf16
-- states, Adafactor under a layout), each one's states and step its own.
local MEASURE_SKIP = { parallel = true, master_dtype = true, optimizer = true }
-- A stage without the head reads no loss field either (models/causal_lm.lua
-- forward_stage: the embedding or the received activation, then its
-- layers): runs that differ in their loss kernel share its passes.
local HEADLESS_SKIP = {}
for _, skip in ipairs({ MEASURE_SKIP, step.UNREAD_BY_LAYERS }) do
  for k in pairs(skip) do HEADLESS_SKIP[k] = true end
end
local function measure_skip(role) return role.last and MEASURE_SKIP or HEADLESS_SKIP end
local SHAPE_SKIP = { parallel = true } -- one layout's roles: one parallel table
-- measured (optional): run.key(lrun, base, measure_skip(role)), when known.
local function measure_key(lrun, L, role, base, measured)
  return table.concat({ measured or run_key(lrun, base, measure_skip(role)),
    tostring(params_on_tape(scheme_of(L))),
    tostring(L.sp), L.tp, L.cp, L.vstages, tostring(role.first), tostring(role.last), role.layers,
    role.chunk_layers }, "|")
end

local function simulate(run, L, role, lrun, search, cutoff, measured)
  local family = run.sim
  local held, mkey
  local function key() -- the measuring pass's key (a search's), once
    mkey = mkey or measure_key(lrun, L, role, search.base, measured)
    return mkey
  end
  -- the pass's name for layers kept across a search's passes (or a
  -- budget's own, M.budget), once
  local names = {}
  local function named(mid)
    if not compose.is_keeping() then return nil end
    local k = mid and 2 or 1
    names[k] = names[k] or layers_identity(lrun, L, search and search.base or run, mid)
    return names[k]
  end
  local function measure() -- the measuring pass, when it is needed
    if role.inflight > 1 then
      held = search and search.held[key()]
      if not held then
        local mid = L.vstages > 1
        local _, info = pass(family, lrun, L, role, nil, mid, nil, nil, named(mid))
        held = info.held
        if search then search.held[key()] = held end
      end
    end
    return held or 0
  end
  local lean -- a lean search: the step replayed from an equal one's record, or recorded
  if search and search.lean and not lrun.timeline and not lrun.trace then
    lean = { key = key() .. "|" .. math.min(L.microbatches, 2) }
    lean.rec = search.replays[lean.key]
    -- a pipeline role whose held bytes are not known yet, one model chunk
    -- per stage: the step's first forward is the measuring pass's, so the
    -- step runs first holding no in-flight block, recorded (its forward's
    -- bytes are the held ones), then is replayed holding them
    if not lean.rec and role.inflight > 1 and L.vstages == 1 and not search.held[key()] then
      pass(family, lrun, L, role, 0, nil, nil, lean, named())
      search.held[key()] = lean.made.held
      search.replays[lean.key], lean.rec, lean.made = lean.made, lean.made, nil
    end
  end
  local st, info = pass(family, lrun, L, role, cutoff and measure or measure(), nil, cutoff,
    lean, not (lean and lean.rec) and named() or nil) -- (a replay walks no layer)
  if not st then return nil end
  if lean and lean.made then search.replays[lean.key] = lean.made end
  info.held = held
  return st, info, lrun
end

-- A compiled estimate's probe of one role (stdlib/compiled_parallel.lua):
-- lrun is the rank-local run traced (run.trace, exact bytes); measuring:
-- the measuring pass's forward -> {trace, names, sent}, else the step with
-- the held bytes as the program's input 1 -> its stats with trace, names.
function M.probe_role(lrun, L, role, measuring)
  if measuring then
    local _, info = pass(lrun.sim, lrun, L, role, nil, L.vstages > 1)
    return info
  end
  return (pass(lrun.sim, lrun, L, role, 1))
end

-- Simulates one role: a measuring pass for the bytes a micro-batch's
-- forward holds, then the step with the in-flight ones in place. search
-- (optional, M.search): measurements of equal keys are shared.
function M.simulate_role(run, L, role, search)
  return simulate(run, L, role, M.local_run(run, L, role), search)
end

-- Run fields that no rank's device memory depends on under layout L, so
-- that runs differing only in them need one simulation (fit --knobs): with
-- the optimizer offloaded, its partitions and its step live on the host
-- (pass: no state on the tape, no step temporaries), so the optimizer's
-- kind and state dtypes move host bytes only. nil: every field counts.
local HOST_OPTIMIZER = { optimizer = true }
function M.device_ignores(L)
  if L.offload.optimizer ~= "none" then return HOST_OPTIMIZER end
end

local function range(r)
  if r[1] == r[2] then return tostring(r[1]) end
  return ("%d-%d"):format(r[1], r[2])
end

-- Communicators a rank joins (one per parallel dimension above 1).
local function comms(L)
  local n = 0
  for _, d in ipairs({ L.dp, L.tp, L.pp, L.cp, L.ep }) do if d > 1 then n = n + 1 end end
  return n
end

-- The NCCL buffers every rank of layout L holds outside the allocator.
function M.nccl_bytes(L) return comms(L) * M.NCCL_PER_COMM end

-- The budget of a parallel run: per_rank (one per pipeline stage, with the
-- ranks it stands for) and the largest rank's figures at the top level;
-- second, each role's timeline (when run.timeline), in per_rank's order,
-- and the largest rank's as `largest`.
-- Under a search (M.search), a role is not simulated where an earlier one
-- builds the same rank-local run with at least as many micro-batches in
-- flight (the middle stages of a pipeline): the two passes differ only in
-- the held block, alive over the forward and backward, so the earlier
-- one's peaks, and its device total, are at least as large; the largest
-- rank and its figures are the same, per_rank lacks the skipped roles.
local budget
function M.budget(run, gpu_name, search)
  if run.parallel.pp > 1 and not search and not (run.timeline or run.trace)
    and not compose.is_keeping() then
    -- a pipeline stage's measuring pass walks the layers its step walks
    -- again, on alike inputs: the budget's passes keep their layers for
    -- one another (stdlib/compose.lua M.keeping; the passes' names tell
    -- them apart), as a search's do
    return compose.keeping({}, "budget", budget, run, gpu_name)
  end
  return budget(run, gpu_name, search)
end
function budget(run, gpu_name, search)
  local L = run.parallel
  local per, top, timelines = {}, nil, {}
  local gpu = gpus.find(gpu_name or run.gpu)
  local nccl = M.nccl_bytes(L)
  local shapes = {} -- a simulated role's run but its layout -> its in-flight count
  -- the run but its layout, master_dtype and optimizer, as a string: with
  -- M.local_inputs, what names a rank-local run's measuring key in a
  -- search (the layouts of one shape but their ZeRO stage share one)
  local given = search and run_key(run, search.base, MEASURE_SKIP) .. "#"
  for _, role in ipairs(M.roles(L, run)) do
    local lrun = M.local_run(run, L, role)
    -- the role's run but its layout, master_dtype and optimizer (and its
    -- loss, on a stage without the head): the measuring pass's key
    -- (run.key), remembered by what it is made from
    local measured
    if search then
      local from = given .. M.local_inputs(run, L, role)
      measured = search.measured[from]
      if not measured then
        measured = run_key(lrun, search.base, measure_skip(role))
        search.measured[from] = measured
      end
    end
    -- and with its master_dtype, string or absent (written by length: the
    -- two parts cannot run into each other)
    local md = lrun.master_dtype
    local shape = L.pp > 1 and measured and (md == nil and "-|" .. measured or
      type(md) == "string" and #md .. ":" .. md .. "|" .. measured or
      run_key(lrun, search.base, SHAPE_SKIP))
    if shape and (shapes[shape] or -1) >= role.inflight then goto next end
    if shape then shapes[shape] = role.inflight end
    local cutoff
    if search and search.limit then
      -- the device total below grows with the peaks, which are at least
      -- what is live (and reserved) at any moment of the step
      local fw = frameworks.of(lrun)
      cutoff = function(live, reserved)
        return frameworks.device_total(fw, { peak = live, peak_reserved = reserved }, gpu, lrun)
          + nccl > search.limit
      end
    end
    local st, info = simulate(run, L, role, lrun, search, cutoff, measured or nil)
    if not st then return nil end
    local b = report.budget(st, lrun, gpu_name)
    if nccl > 0 then
      b.assumptions[#b.assumptions + 1] = ("NCCL: %d communicator(s) x 128 MiB (4 MiB buffers "
        .. "x 2 x 16 channels, assumed)"):format(comms(L))
      b.device_total_bytes = b.device_total_bytes + nccl
      if gpu then
        b.headroom_bytes = b.headroom_bytes - nccl
        b.fits = b.headroom_bytes >= 0
      end
    end
    for _, a in ipairs(info.assumptions) do b.assumptions[#b.assumptions + 1] = a end
    if L.pp > 1 then
      b.assumptions[#b.assumptions + 1] = ("pipeline: %d micro-batch%s in flight (%s), "
        .. "%d B held each"):format(role.inflight, role.inflight == 1 and "" or "es",
          L.schedule, info.held or 0)
    end
    local name = L.pp == 1 and "all ranks" or
      (role.first and role.last and "stage" or role.first and "first stage" or
        role.last and "last stage" or ("stage " .. role.stage))
    local e = {
      role = name, stage = role.stage, ranks = range(role.ranks),
      rank_count = role.ranks[2] - role.ranks[1] + 1,
      peak_bytes = b.peak_bytes, peak_phase = b.peak_phase, peak_op = b.peak_op,
      reserved_bytes = b.reserved_bytes, device_total_bytes = b.device_total_bytes,
      breakdown = b.breakdown, host_bytes = info.host, nvme_bytes = info.nvme,
      param_count = info.param_count, trainable_param_count = info.trainable_count,
      model_states = info.states, inflight_microbatches = role.inflight,
      microbatch_held_bytes = info.held,
      layers = role.layers, fits = b.fits, headroom_bytes = b.headroom_bytes,
      assumptions = b.assumptions,
    }
    per[#per + 1] = e
    timelines[#per] = st.timeline
    if not top or e.device_total_bytes > top.device_total_bytes then
      top = e; top.budget = b; timelines.largest = st.timeline
    end
    if search and search.limit and e.device_total_bytes > search.limit then return nil end
    ::next::
  end
  local b = top.budget
  top.budget = nil
  b.param_count = nil
  b.trainable_param_count = nil
  b.per_rank = per
  b.host_bytes = top.host_bytes
  b.layout = { dp = L.dp, tp = L.tp, pp = L.pp, cp = L.cp, ep = L.ep, world = L.world,
    sequence_parallel = L.sp, zero = L.zero, fsdp = L.fsdp, fsdp_version = L.fsdp and
    L.fsdp_version or nil, microbatches = L.microbatches, pp_schedule = L.schedule,
    offload = L.offload }
  b.largest_rank = top.ranks
  return b, timelines
end

-- Terminal: one table per rank role.
function M.text(b, title)
  local out = {}
  local function add(s) out[#out + 1] = s end
  local L = b.layout
  if title then add(title) end
  add(("layout: dp=%d tp=%d pp=%d cp=%d ep=%d (world %d)%s%s%s"):format(L.dp, L.tp, L.pp, L.cp,
    L.ep, L.world, L.sequence_parallel and " +sp" or "",
    L.zero > 0 and (" zero-" .. L.zero) or "",
    L.fsdp and (" fsdp " .. L.fsdp .. " v" .. L.fsdp_version) or ""))
  for _, r in ipairs(b.per_rank) do
    add("")
    add(("== %s (ranks %s): peak %s [%d B] in %s"):format(r.role, r.ranks,
      vram.fmt(r.peak_bytes, "GiB"), r.peak_bytes, r.peak_phase))
    add(("%-16s %16s %11s %6s"):format("component", "bytes", "GiB", "share"))
    for _, it in ipairs(r.breakdown) do
      add(("%-16s %16d %11.3f %5.1f%%"):format(it.category, it.bytes, it.bytes / (1 << 30),
        it.bytes / r.peak_bytes * 100))
    end
    add(("device total (reserved + framework + NCCL): %s"):format(
      vram.fmt(r.device_total_bytes, "GiB")))
    if r.host_bytes > 0 then add(("host memory (offload, pinned): %s"):format(
      vram.fmt(r.host_bytes, "GiB"))) end
    if r.nvme_bytes > 0 then add(("NVMe: %s"):format(vram.fmt(r.nvme_bytes, "GiB"))) end
    if r.fits ~= nil then
      add(("%s on %s: headroom %s"):format(r.fits and "FITS" or "DOES NOT FIT", b.gpu.name,
        vram.fmt(r.headroom_bytes, "GiB")))
    end
    for _, a in ipairs(r.assumptions) do add("  assumption: " .. a) end
  end
  return table.concat(out, "\n")
end

-- Communication volume one rank sends per step (L.microbatches micro-
-- batches) under a layout (bytes), the
-- ordering key of `fit --gpus`: ring all-reduce moves 2(n-1)/n of the
-- buffer, ZeRO-3 / FSDP 3(n-1)/n (two all-gathers and a reduce-scatter);
-- Megatron TP 4 all-reduces of the layer's activations per micro-batch,
-- PP one activation and one gradient per micro-batch, ring attention
-- (cp-1) K/V passes forward and twice that backward. A model, not a time.
function M.comm_bytes(run, L, params)
  local m = run.text
  local g = vram.bytes(run.dtype, 1)
  local mb = L.microbatches
  local tokens = run.batch * run.seq // L.cp
  local lay = m.layers // L.pp
  local v = 0
  local n = L.dp * L.cp
  if n > 1 then
    local k = (L.zero == 3 or (L.fsdp and L.fsdp ~= "no_shard")) and 3 or 2
    v = v + k * (n - 1) * params * g // n
  end
  if L.tp > 1 then
    v = v + 8 * (L.tp - 1) * tokens * m.hidden * g // L.tp * lay * mb
  end
  if L.pp > 1 then v = v + 2 * tokens * m.hidden * g * mb end
  if L.cp > 1 then
    v = v + 3 * (L.cp - 1) * 2 * tokens * (m.kv_heads * m.head_dim) * g * lay * mb
  end
  if L.ep > 1 then -- dispatch and combine, forward and backward, per MoE layer
    local moe_layers = 0
    for i = 1, lay do if not m.moe_layers or m.moe_layers[i] then moe_layers = moe_layers + 1 end end
    v = v + 4 * (L.ep - 1) * tokens * m.moe.top_k * m.hidden * g // L.ep * moe_layers * mb
  end
  return v
end

local function divisors(n)
  local out = {}
  for d = 1, n do if n % d == 0 then out[#out + 1] = d end end
  return out
end

-- Every layout of `gpus` ranks this model admits: dp x tp x pp x cp x ep,
-- tp within a node, with each data-parallel sharding choice.
function M.layouts(run, gpus)
  local m = run.text
  local out = {}
  local per_node = M.DEFAULTS.gpus_per_node
  local experts = m.moe and m.moe.experts
  for _, tp in ipairs(divisors(gpus)) do
    local tp_ok = tp <= per_node and m.heads % tp == 0 and m.intermediate % tp == 0
      and (m.kv_heads % tp == 0 or tp % m.kv_heads == 0)
      and (tp == 1 or (run.batch * run.seq) % tp == 0)
    for _, pp in ipairs(tp_ok and divisors(gpus // tp) or {}) do
      for _, cp in ipairs(m.layers % pp == 0 and divisors(gpus // (tp * pp)) or {}) do
        local cp_ok = cp == 1 or (run.attention ~= "eager" and run.seq % (2 * cp) == 0
          and ((run.batch * run.seq // cp) % tp == 0))
        local dp = gpus // (tp * pp * cp)
        for _, ep in ipairs(cp_ok and divisors(dp) or {}) do
          local impl = run.moe and run.moe.impl
          if ep == 1 or (experts and experts % ep == 0 and (not impl or impl == "grouped")) then
            local base = { dp = dp, tp = tp, pp = pp, cp = cp, ep = ep }
            local shard = { { zero = 0 } }
            if dp * cp > 1 then
              shard = { { zero = 0 }, { zero = 1 }, { zero = 2 }, { zero = 3 } }
              if ep == 1 then shard[5] = { fsdp = "full_shard" } end -- FSDP x EP: not modelled
            end
            for _, s in ipairs(shard) do
              -- every layout steps the same global batch, batch x grad_accum x
              -- gpus: the ranks of a data-parallel replica share its micro-batches
              local t = { sequence_parallel = tp > 1 or nil,
                microbatches = (run.grad_accum or 1) * tp * pp * cp }
              for k, x in pairs(base) do t[k] = x end
              for k, x in pairs(s) do t[k] = x end
              out[#out + 1] = t
            end
          end
        end
      end
    end
  end
  return out
end

-- Layouts of `gpus` GPUs whose every rank fits `budget` bytes (device
-- total), cheapest in communication first.
function M.fit(run, gpus, budget, where)
  local fits, search = {}, M.search(run, budget, true) -- reads needs, counts and host bytes
  local all = M.layouts(run, gpus)
  -- priced last first: of the layouts that differ only in how the
  -- data-parallel ranks keep the states (ZeRO 0-3, FSDP: listed from the
  -- least sharded), the more sharded fit more often, and a pass that
  -- completes is recorded for the others' forward and backward (M.search),
  -- where one cut off midway (too large) records nothing. Listed in
  -- M.layouts' order all the same (the sort below keeps ties as they come).
  local priced = {}
  -- a pass walks the layers another layout's pass walked alike (the same
  -- tensor parallelism, experts per rank, sequence share and parameter
  -- storage) only once (layers_identity, stdlib/compose.lua M.keeping)
  compose.keeping({}, "fit", function()
    for i = #all, 1, -1 do
      local t = all[i]
      local r = with(run, {}) -- shallow: nothing a budget calls edits a run
      r.parallel = M.check(M.read(t, where, r), r, where)
      local b = M.budget(r, nil, search) -- nil: needs more than the budget
      if b and b.device_total_bytes <= budget then
        local params = 0
        for _, e in ipairs(b.per_rank) do params = math.max(params, e.param_count) end
        -- 1F1B's idle share: (p - 1) / (m + p - 1) (v chunks divide p - 1 by v)
        local bubble = (t.pp - 1) / (t.microbatches + t.pp - 1)
        priced[i] = { layout = t, need = b.device_total_bytes, bubble = bubble,
          comm = M.comm_bytes(r, r.parallel, params), host = b.host_bytes }
      end
    end
  end)
  for i = 1, #all do fits[#fits + 1] = priced[i] end
  table.sort(fits, function(a, b)
    if a.comm ~= b.comm then return a.comm < b.comm end
    return a.need < b.need
  end)
  return fits, #all
end

-- "dp8 zero-3", "tp2+sp pp2 dp2", "dp4 fsdp full_shard offload optimizer+params"
-- of a layout table as written (M.layouts) or as read (M.read).
function M.layout_name(t)
  local parts = {}
  for _, k in ipairs({ "dp", "tp", "pp", "cp", "ep" }) do
    if (t[k] or 1) > 1 or k == "dp" then
      parts[#parts + 1] = k .. (t[k] or 1)
        .. (k == "tp" and (t.sequence_parallel or t.sp) and "+sp" or "")
    end
  end
  if (t.zero or 0) > 0 then parts[#parts + 1] = "zero-" .. t.zero end
  if t.fsdp then parts[#parts + 1] = "fsdp " .. t.fsdp end
  if (t.dp or 1) * (t.cp or 1) > 1 and (t.zero or 0) == 0 and not t.fsdp then
    parts[#parts + 1] = "ddp"
  end
  local off, what = t.offload or {}, {}
  for _, k in ipairs({ "optimizer", "params" }) do
    if (off[k] or "none") ~= "none" then what[#what + 1] = k end
  end
  if #what > 0 then parts[#parts + 1] = "offload " .. table.concat(what, "+") end
  return table.concat(parts, " ")
end

return M
