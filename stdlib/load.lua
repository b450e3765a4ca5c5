-- The load phase: the weights arriving on the device before the first step
-- (tests/truth/harness/probe.py load_model measures it). Tensors arrive one
-- at a time in the model's module order. run.load:
--   from   the checkpoint's dtype (default: the parameters' own)
--   cast   host   (default) cast before the copy, as transformers does
--                 (param.to(dtype), then to the device): no extra bytes
--          tensor each tensor arrives in `from` and is cast on the device:
--                 its copy and its cast live together
--          device the whole model arrives in `from`, then model.to(dtype)
--                 casts one parameter at a time
-- bitsandbytes 4-bit weights (QLoRA from an unquantized checkpoint) are
-- quantized on arrival (Params4bit._quantize): the weight whole in the
-- compute dtype, then the packed output and its fp32 absmax; with double
-- quantisation the absmax and its centred copy (absmax - mean) are fp32
-- temporaries while quantize_blockwise runs. peft's adapters are created
-- after the load (setup). Not modelled: FSDP's rank-0 loading.
local L = {}

local BNB4 = require("stdlib.layers").BNB4

-- Arms S for the build: every checkpoint parameter created from now on gets
-- its arrival transient (Sim:param calls S.on_load).
function L.begin(S, run)
  local ld = run.load or {}
  local from, cast = ld.from, ld.cast or "host"
  local quant = run.quant
  S.load_params = {}
  S.on_load = function(p)
    S.load_params[#S.load_params + 1] = p
    if BNB4[p.dt] and quant and not quant.ckpt then
      local t = S:bytes(quant.compute, p.n)
      if p.dt == "nf4_dq" then t = t + 2 * S:bytes("fp32", (p.n + 63) // 64) end
      S:temp(t, "load.quantize_4bit")
    elseif cast == "tensor" and from and from ~= p.dt then
      S:temp(S:bytes(from, p.n), "load.checkpoint_copy")
    end
  end
end

-- Ends the load: model.to(dtype) over the whole model (cast device). The
-- adapters peft creates afterwards wait for S:flush_adapters (setup).
-- At parameter i of the cast, the later ones are still in `from` and i has
-- both copies: live = final + sum_{j>=i}(from_j - final_j) + final_i.
function L.finish(S, run)
  local ld = run.load or {}
  if ld.cast == "device" and ld.from then
    local excess, worst = 0, 0
    local ps = require("stdlib.sim").expand(S.load_params)
    for i = #ps, 1, -1 do
      local p = ps[i]
      excess = excess + S:bytes(ld.from, p.n) - p.b
      worst = math.max(worst, excess + p.b)
    end
    if worst > 0 then S:temp(worst, "load.cast_on_device") end
  end
  S.on_load, S.load_params = nil, nil
end

-- What the report says about the load (report.budget): the phase's peak,
-- whether it is the run's, and how the weights arrived.
function L.summary(st, run)
  local pp = st.phase_peaks or {}
  if not pp.load then return nil end
  local step = 0
  for ph, v in pairs(pp) do
    if ph ~= "load" then step = math.max(step, v) end
  end
  local ld = run.load or {}
  local how = ld.from and ("from " .. ld.from .. ", cast " .. (ld.cast or "host"))
    or "in the parameters' dtype"
  local q = run.quant
  if q and BNB4[q.store] and not q.ckpt and not q.master then
    how = how .. ", linear weights quantized to " .. q.store .. " on arrival"
  end
  return { load_peak_bytes = pp.load, step_peak_bytes = step, how = how,
    run_peak = pp.load > step and "load" or "step" }
end

return L
