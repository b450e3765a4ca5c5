-- What tests/lock/regression.lua locks (see there): the runs and configs,
-- and the numbers kept of each.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local report = require("stdlib.report")
local P = require("stdlib.params")
local registry = require("models.registry")

local M = {}
local root = vram.share_dir
M.path = root .. "/tests/lock/estimates.json"

local SPECS = { "llama_3_8b_qlora.json", "qwen2_5_1_5b_full.yaml", "qwen3_vl_4b_ppo.yaml",
  "yxanul.yaml" }
-- one image run per VLM preset, two layers of text so that it stays fast
local VLMS = { "qwen2_vl_2b_instruct", "qwen3_vl_4b_instruct", "internvl2_2b", "internvl3_2b",
  "paligemma_3b_mix_224", "mistral_small_3_1_24b_instruct_2503" }

local function budget(run, with_device)
  local b = report.budget(step.run(run), run)
  local out = { peak_bytes = b.peak_bytes, reserved_bytes = b.reserved_bytes,
    peak_phase = b.peak_phase, peak_op = b.peak_op or "", breakdown = {},
    param_count = b.param_count, trainable_param_count = b.trainable_param_count,
    phase_peaks = {} }
  for _, it in ipairs(b.breakdown) do out.breakdown[it.category] = it.bytes end
  for k, v in pairs(b.phase_peaks or {}) do out.phase_peaks[k] = v end
  if with_device then out.device_total_bytes = b.device_total_bytes end
  return out
end

function M.compute()
  local out = { truth = {}, specs = {}, vlm = {}, params = {} }
  local cases_path = root .. "/tests/truth/cases_public.json"
  for _, case in ipairs(vram.json.load(cases_path)) do
    -- cases of families not modelled yet are skipped, as accuracy.lua does
    if M.supported(case) then
      out.truth[case.id] = budget(M.truth_run(case, cases_path), false)
    end
  end
  for _, name in ipairs(SPECS) do
    local path = root .. "/examples/specs/" .. name
    out.specs[name] = budget(M.spec_run(path), true)
  end
  for _, name in ipairs(VLMS) do
    for _, mode in ipairs({ "train", "inference" }) do
      local s = { model = { preset = name, overrides = { num_hidden_layers = 2 } },
        run = { mode = mode, batch = 2, seq = 64,
          images = { count = 2, width = 640, height = 480 },
          lora = mode == "train" and { rank = 8 } or nil,
          grad_checkpointing = mode == "train" and "full" or nil } }
      out.vlm[name .. "." .. mode] = budget(M.spec_table_run(s, root .. "/tests/lock/vlm.yaml"),
        true)
    end
  end
  for _, p in ipairs(registry.PRESETS) do
    local r = M.count(root .. "/" .. registry.preset_path(p.name))
    local parts = {}
    for i, x in ipairs(r.parts) do parts[i] = { name = x.name, params = x.params,
      tower = x.tower or "llm" } end
    out.params[p.name] = { total = r.total, trainable = r.trainable,
      tied_duplicate = r.tied_duplicate, family = r.family, parts = parts }
  end
  return out
end

function M.supported(case) return require("stdlib.truth").supported(case, registry) end

-- The calls that reach the code under test.
function M.truth_run(case, where) return spec.normalize(case, where, registry) end
function M.spec_run(path) return spec.load(path, registry) end
function M.spec_table_run(s, where) return spec.normalize(s, where, registry) end
function M.count(path)
  local cfg = vram.json.load(path)
  local family, typed = registry.find(cfg, path)
  return P.count(family, typed, path)
end

return M
