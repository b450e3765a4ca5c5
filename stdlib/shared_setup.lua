-- Models built once for the runs of a search that differ only in what no
-- setup reads (stdlib/step.lua's setup: the model built and loaded, its
-- adapters made). While M.sharing runs f, a step simulated for `run`
-- itself (that table) on a simulator that keeps no timeline or trace
-- (step.new_sim: composable, recycled) takes its setup from cache[key] --
-- the model, the simulator's fields and a copy of its tape as they stood
-- once it was built (tape:assign) -- or puts it there. key must hold
-- everything a setup reads: the run written out less
-- step.UNREAD_BY_LAYERS (a setup builds the layers' parameters and reads
-- neither the loss nor the optimizer; tests/lua/test_fit.lua checks that
-- of every example spec and measured truth case). fit --knobs simulates
-- dozens of runs that differ only in their loss kernel; each then starts
-- from the built model, as a search's lean passes do
-- (stdlib/parallel.lua). A model is shared, not copied: nothing after the
-- setup writes into it but the caches its tables fill when read
-- (Sim:build_layers), the same for every run. tests/lib/compare.lua's
-- walked turns it off to compare.
local vram = require("vram")
local step = require("stdlib.step")
local entries = require("stdlib.run").shallow -- a list S holds, filled by the setup

local M = {}

-- What the setup leaves on S is kept but its tape and its part in
-- compose.keeping: tables as their entries (a later list, S.params, is
-- its own), other values as they are; a function or another userdata
-- (which might hold this S) leaves the setup unshared.
local UNSHARED = { tape = true, kept = true }
local shelf -- { cache, key, run } while M.sharing runs
-- tag (optional): a layout's pass building its rank's model
-- (stdlib/parallel.lua run_pass), kept under the key and what tells the
-- passes of one run apart (its stage, whether it measures a middle chunk):
-- its run is the rank's share of `run`, fixed by run (its layout) and
-- those.
local function shared(S, family, run, setup, tag)
  local sh = shelf
  if not (sh and (tag or sh.run == run) and S.recycle and S.composable and not S.timeline) then
    return setup(S, family, run)
  end
  local key = tag and sh.key .. "|" .. tag or sh.key
  local kept = sh.cache[key]
  if kept then
    S.tape:assign(kept.tape)
    for k in pairs(S) do if not UNSHARED[k] and kept.fields[k] == nil then S[k] = nil end end
    for k, v in pairs(kept.fields) do S[k] = type(v) == "table" and entries(v) or v end
    return kept.model
  end
  local model = setup(S, family, run)
  local fields = {}
  for k, v in pairs(S) do
    if not UNSHARED[k] then
      local t = type(v)
      if t == "function" or t == "userdata" or t == "thread" then return model end
      fields[k] = t == "table" and entries(v) or v
    end
  end
  local tape = vram.tape()
  tape:assign(S.tape)
  sh.cache[key] = { tape = tape, fields = fields, model = model }
  return model
end

function M.sharing(cache, key, run, f, ...)
  local before, hook = shelf, step.setup_override
  shelf, step.setup_override = { cache = cache, key = key, run = run }, shared
  local out = table.pack(pcall(f, ...))
  shelf, step.setup_override = before, hook
  if not out[1] then error(out[2], 0) end
  return table.unpack(out, 2, out.n)
end

return M
