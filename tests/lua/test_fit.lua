-- Knob advice (stdlib/fit.lua): a lever is offered only where it changes
-- the run, and every saving it shows is the simulator's, checked here
-- against separate estimates of runs written out by hand.
local vram = require("vram")
local spec = require("stdlib.spec")
local fit = require("stdlib.fit")

local root = vram.share_dir
local tests = {}

local function run_of(fields)
  local r = { mode = "train", batch = 4, seq = 512, precision = { params = "bf16" },
    optimizer = { name = "adamw", state_dtype = "fp32" }, framework = "pytorch" }
  for k, v in pairs(fields or {}) do r[k] = v end
  return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct",
    overrides = { num_hidden_layers = 4 } }, run = r }, root .. "/tests/lua/spec.yaml",
    require("models.registry"))
end

local function names(list)
  local s = {}
  for _, e in ipairs(list) do s[#s + 1] = e.knobs end
  return table.concat(s, "\n")
end

local BIG = 1 << 50 -- every combination fits: the advice itself is under test

function tests.a_lever_the_run_already_uses_is_never_offered()
  local list = fit.knobs(run_of({ attention = "sdpa", grad_checkpointing = "full",
    loss = { impl = "chunked" } }), BIG)
  local all = names(list)
  T.ok(not all:find("sdpa", 1, true), "sdpa is already on")
  T.ok(not all:find("checkpointing", 1, true), "checkpointing is already on")
  T.ok(not all:find("chunked cross-entropy", 1, true), "the loss is already chunked")
  T.ok(#list > 1, "other levers remain")
end

function tests.inference_gets_no_training_levers()
  local list = fit.knobs(run_of({ mode = "inference", optimizer = "none" }), BIG)
  local all = names(list)
  for _, w in ipairs({ "AdamW", "LoRA", "checkpointing", "accumulation", "cross-entropy" }) do
    T.ok(not all:find(w, 1, true), w .. " is not a lever for inference")
  end
end

-- The spec's own largest movable component: with eager attention off and
-- the logits' fp32 log-softmax whole, chunking the loss is offered alone,
-- and its saving is exactly what a run written with a chunked loss needs less.
function tests.chunked_cross_entropy_is_offered_with_the_saving_of_a_chunked_run()
  local base = run_of({ attention = "sdpa" })
  local list, base_need = fit.knobs(base, BIG)
  local entry
  for _, e in ipairs(list) do
    if e.knobs == "chunked cross-entropy (1024 rows)" then entry = e end
  end
  T.ok(entry, "chunked cross-entropy is offered on its own")
  local chunked = run_of({ attention = "sdpa", loss = { impl = "chunked", chunk_rows = 1024 } })
  T.eq(entry and entry.need, fit.need(chunked))
  T.eq(entry and entry.saving, base_need - fit.need(chunked))
  T.eq(base_need, fit.need(base))
end

-- Every member of every listed combination saves at least MIN_SAVING of
-- what the combination needs without it: recomputed from scratch here by
-- applying the menu's edits to copies of the run.
function tests.every_lever_in_a_combination_saves_memory_in_it()
  local base = run_of({})
  local by_name = {}
  for _, m in ipairs(fit.MENU) do by_name[m.name] = m end
  local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
    return c
  end
  local list = fit.knobs(base, BIG, 2)
  T.ok(#list > 5)
  for _, e in ipairs(list) do
    if e.knobs ~= "as given" then
      local parts = {}
      for p in (e.knobs .. " + "):gmatch("(.-) %+ ") do parts[#parts + 1] = p end
      for skip = 1, #parts do
        local r = copy(base)
        for k, p in ipairs(parts) do if k ~= skip then by_name[p].edit(r) end end
        local without = fit.need(r)
        T.ok(without - e.need >= without * fit.MIN_SAVING, e.knobs .. ": " .. parts[skip])
      end
    end
  end
end

function tests.qlora_is_offered_only_where_it_saves_more_than_lora()
  local list = fit.knobs(run_of({}), BIG, 1)
  local lora, qlora
  for _, e in ipairs(list) do
    if e.knobs == "LoRA r=16 (q,k,v,o)" then lora = e.need end
    if e.knobs == "QLoRA r=16 (q,k,v,o) on nf4 weights" then qlora = e.need end
  end
  T.ok(lora and qlora and qlora < lora, "nf4 weights save on top of LoRA in a decoder")
end

return tests
