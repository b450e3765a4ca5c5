-- A team's shared budget defaults: the GPUs it can rent and the training
-- policy it uses unless a script says otherwise. Scripts beside this file
-- `require("team")`; pass the folder on as it is.
local vram = require("vram")
vram.require_version("0.1")

local M = {}

-- What the team can get, smallest first (names from `stdlib/gpus.lua`).
M.fleet = { "rtx4090", "l40s", "a100-80gb", "h100-80gb", "h200" }

-- Keep this much of every GPU free for fragmentation and the unexpected.
M.margin = 0.08

-- The house training policy, as a run-spec `run` table.
function M.policy(fields)
  local run = { mode = "train", batch = 1, seq = 2048, attention = "sdpa",
    precision = { params = "bf16" }, optimizer = { name = "adam8bit" },
    grad_checkpointing = "full" }
  for k, v in pairs(fields or {}) do run[k] = v end
  return run
end

-- A normalized run for a preset under the policy.
function M.run(preset, fields, where)
  return require("stdlib.spec").normalize({ model = { preset = preset },
    run = M.policy(fields) }, where, require("models.registry"))
end

return M
