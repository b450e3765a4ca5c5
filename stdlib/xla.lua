-- A jitted XLA step in JAX's own terms. The rules are the profile's
-- (stdlib/frameworks/jax.lua, `jit`); this file holds the few hooks the
-- simulator needs for them and the figures compiled.memory_analysis()
-- prints for a compiled step (jax.stages.Compiled.memory_analysis():
-- argument_size_in_bytes, output_size_in_bytes, alias_size_in_bytes,
-- temp_size_in_bytes), so a user can compare with what XLA says.
local frameworks = require("stdlib.frameworks")
local errors = require("stdlib.errors")

local M = {}

-- run.xla in a run spec: { donate = bool, mem_fraction = 0 < x <= 1,
-- preallocate = bool }; nil fields keep the profile's defaults.
function M.read(tbl, where, framework)
  if tbl == nil then return nil end
  local p = frameworks.get(framework)
  if not p.jit then
    errors.input(where, "run.xla", ("applies to a jitted framework (jax), not '%s'")
      :format(framework))
  end
  errors.keys(tbl, { donate = 1, mem_fraction = 1, preallocate = 1 }, where, "run.xla.")
  local rd = require("stdlib.config").reader(tbl, where, "run.xla.")
  local f = rd:num("mem_fraction", nil)
  if f and not (f > 0 and f <= 1) then rd:fail("mem_fraction", "must be in (0, 1], got " .. f) end
  return { donate = rd:bool("donate", nil), mem_fraction = f,
    preallocate = rd:bool("preallocate", nil) }
end

-- The rules for a run: the profile's jit table with the run's overrides, or
-- nil for an eager framework.
function M.rules(run)
  local p = frameworks.get(run.framework or frameworks.EXACT)
  if not p.jit then return nil end
  local o = run.xla or {}
  local r = {}
  for k, v in pairs(p.jit) do r[k] = v end
  if o.donate ~= nil then r.donate = o.donate end
  r.fraction = o.mem_fraction or p.prealloc
  r.preallocate = o.preallocate ~= false
  return r
end

-- Outputs of one jitted training step: without donation the new
-- parameters and optimizer state are buffers of their own for the whole
-- program (XLA allocates every output before it runs), beside the old
-- ones the caller still holds. `state_bytes`: the optimizer state the step
-- updates. Returns handles for end_outputs, or nil when nothing is added.
function M.begin_outputs(S, trainable, state_bytes)
  local j = S.jit
  if not j or j.donate then return nil end
  local pb = require("stdlib.sim").sum(trainable, "b") -- (identical layers' groups)
  local h = {}
  if pb > 0 then h[#h + 1] = S.tape:alloc(pb, "weights", "xla.output.new_params") end
  if state_bytes > 0 then
    h[#h + 1] = S.tape:alloc(state_bytes, "optimizer_state", "xla.output.new_opt_state")
  end
  return h
end

-- The call returned: the caller rebinds its state, the old buffers go and
-- the new ones take their place (same sizes), so the outputs' bytes go.
function M.end_outputs(S, h)
  for _, id in ipairs(h or {}) do S.tape:drop(id) end
end

-- compiled.memory_analysis()'s terms for a simulated step. st.xla (set by
-- the simulation): { arguments = bytes live when the step is called
-- (parameters, optimizer state, the batch), state = bytes of parameters
-- and optimizer state the step returns, donate = bool }. temp is what the
-- peak needs beyond arguments and un-aliased outputs: activations,
-- residuals, gradients, loss buffers.
function M.terms(st)
  local x = st.xla
  if not x then return nil end
  local out = x.state
  local alias = x.donate and out or 0
  return { arguments = x.arguments, outputs = out, alias = alias,
    temp = st.peak - x.arguments - (out - alias), total = st.peak }
end

-- One line per term, as a report prints them.
function M.lines(t)
  local vram = require("vram")
  local function g(b) return vram.fmt(b, "GiB") end
  return {
    ("XLA terms (as compiled.memory_analysis()): arguments %s, outputs %s, aliased %s, "
      .. "temporaries %s; arguments + outputs - aliased + temporaries = %s"):format(
      g(t.arguments), g(t.outputs), g(t.alias), g(t.temp), g(t.total)),
  }
end

-- The assumption a report prints about donation.
function M.donation_note(rules)
  if rules.donate then
    return "jit with donate_argnums: the new parameters and optimizer state alias the old ones"
  end
  return "jit without donate_argnums (JAX's default): new parameters and optimizer state "
    .. "coexist with the old ones while the step runs"
end

return M
