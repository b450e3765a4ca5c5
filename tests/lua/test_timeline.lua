-- The step's memory timeline (vr_tape_timeline, stdlib/timeline.lua):
-- events written out by hand on small tapes, and on real steps the replayed
-- timeline must meet the tape's own peak counters (two independent paths).
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local timeline = require("stdlib.timeline")

local root = vram.share_dir
local tests = {}

local function events(tape)
  local out = {}
  for i = 1, tape:timeline_len() do
    local d, cat, phase, rec, op = tape:timeline_event(i)
    out[i] = { d, cat, phase, rec, op or false }
  end
  return out
end

function tests.a_tape_keeps_no_timeline_unless_asked()
  local t = vram.tape()
  t:alloc(100, "activations", "a")
  T.eq(t:timeline_len(), 0)
end

function tests.every_change_of_live_bytes_is_one_event_with_its_category_op_and_phase()
  local t = vram.tape()
  t:timeline(true)
  local w = t:param(40, "weights", "w")
  t:phase("forward")
  local a = t:alloc(100, "activations", "a")
  t:temp(7, "temporaries", "scratch")
  t:drop(a)
  T.eq(events(t), {
    { 40, "weights", "setup", false, "w" },
    { 100, "activations", "forward", false, "a" },
    { 7, "temporaries", "forward", false, "scratch" },
    { -7, "temporaries", "forward", false, "scratch" },
    { -100, "activations", "forward", false, false },
  })
  T.raises(function() t:timeline_event(6) end, "no timeline event 6 (the tape kept 5)")
  T.raises(function() t:timeline_event(0) end, "no timeline event 0")
  t:drop(w)
end

-- A checkpointed segment: forward keeps only its input; backward recomputes
-- the 30-byte intermediate (flagged), then runs the segment's node.
function tests.a_checkpointed_segment_s_recomputation_is_flagged()
  local t = vram.tape()
  t:timeline(true)
  local p = t:param(8, "weights", "p")
  t:phase("forward")
  local x = t:alloc(10, "activations", "x")
  t:ckpt_begin()
  local h = t:alloc(30, "activations", "h")
  t:node({ x }, { p, 8 }, { h }, 0, "mul")
  t:ckpt_end({ x }, { h }, "segment")
  t:phase("backward")
  t:backward(h)
  local recomputed, after = 0, 0
  for _, e in ipairs(events(t)) do
    if e[4] then recomputed = recomputed + e[1] T.eq(e[3], "backward") end
    if e[3] == "backward" and not e[4] then after = after + 1 end
  end
  T.eq(recomputed, 30, "the recomputation allocates h again, and only h")
  T.ok(after > 0, "the segment's backward itself is not flagged")
  local tl = timeline.collect(t)
  local names = {}
  for _, part in ipairs(timeline.parts(tl)) do names[#names + 1] = part.name end
  T.eq(names, { "setup", "forward", "backward", "recompute", "backward" })
end

local function qwen(fields)
  local r = { mode = "train", batch = 2, seq = 128, precision = { params = "bf16" },
    framework = "pytorch", optimizer = { name = "adamw" }, attention = "sdpa" }
  for k, v in pairs(fields or {}) do r[k] = v end
  local run = spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct",
    overrides = { num_hidden_layers = 4 } }, run = r }, root .. "/tests/lua/spec.yaml",
    require("models.registry"))
  run.timeline = true
  return run, step.run(run)
end

-- The replay adds the deltas in Lua; the tape's peak counters are kept in C
-- as it runs. They must agree byte for byte, category by category.
function tests.the_replayed_timeline_peaks_where_the_tape_says_with_the_same_breakdown()
  for _, fields in ipairs({ {}, { grad_checkpointing = "full" }, { mode = "inference" },
      { mode = "generate", generate_tokens = 4 } }) do
    local _, st = qwen(fields)
    local tl = st.timeline
    T.eq(tl.peak.live, st.peak, fields.mode or fields.grad_checkpointing or "train")
    T.eq(tl.peak.phase, st.peak_phase)
    T.eq(tl.peak.op, st.peak_op)
    for cat, v in pairs(st.at_peak) do T.eq(tl.peak.by[cat] or 0, v, cat) end
    local top = 0
    for _, s in ipairs(tl.samples) do top = math.max(top, s.live) end
    T.eq(top, st.peak, "the samples keep the peak")
    T.ok(#tl.samples <= timeline.SAMPLES)
  end
end

function tests.only_a_checkpointed_step_has_a_recompute_part()
  local function has(fields)
    local _, st = qwen(fields)
    for _, p in ipairs(timeline.parts(st.timeline)) do
      if p.name == "recompute" then return true end
    end
    return false
  end
  T.eq(has({ grad_checkpointing = "full" }), true)
  T.eq(has({}), false)
end

function tests.the_sparkline_has_one_column_per_step_slice_and_a_letter_for_each_part()
  local _, st = qwen({ grad_checkpointing = "full" })
  local line, marks, legend = timeline.sparkline(st.timeline, 40)
  local cols = {}
  for ch in line:gmatch(utf8.charpattern) do cols[#cols + 1] = ch end
  T.eq(#cols, 40)
  T.eq(#marks, 40)
  T.ok(line:find("█", 1, true), "the peak reaches full height")
  local known = {}
  for l, name in legend:gmatch("(%w)=([%w_]+)") do known[l] = name end
  for ch in marks:gmatch(".") do T.ok(known[ch], "letter " .. ch .. " is in the legend") end
  T.eq(known[marks:sub(1, 1)], "load") -- the weights arriving (stdlib/load.lua)
  T.eq(known[marks:sub(-1)], "zero_grad")
  T.ok(legend:find("=recompute", 1, true))
end

-- A phase of a few events among thousands (zero_grad, the optimizer of a
-- small model) keeps a column of its own, however narrow the sparkline.
function tests.every_phase_with_a_sample_keeps_a_column()
  local _, st = qwen({})
  local tl = st.timeline
  local letter = timeline.letters(timeline.parts(tl))
  local phases, n = {}, 0
  for _, s in ipairs(tl.samples) do
    if not phases[s.phase] then phases[s.phase] = true; n = n + 1 end
  end
  for _, width in ipairs({ n, 12, 64 }) do
    local line, marks = timeline.sparkline(tl, width)
    T.eq(utf8.len(line), width)
    for ph in pairs(phases) do
      T.ok(marks:find(letter[ph], 1, true), ("%s drawn at width %d: %s"):format(ph, width, marks))
    end
  end
end

return tests
