-- Budgets for people and programs: a terminal table, JSON (exact integer
-- bytes, stable keys), Markdown and CSV. Units are always labelled.
local vram = require("vram")
local gpus = require("stdlib.gpus")
local frameworks = require("stdlib.frameworks")

local R = {}

R.ORDER = vram.categories() -- the tape's categories, in report order

-- A budget: the simulator's stats plus what the reader needs around them.
function R.budget(st, run, gpu_name)
  local b = {
    peak_bytes = st.peak,
    peak_phase = st.peak_phase,
    peak_op = st.peak_op,
    breakdown = {},
    phase_peaks = st.phase_peaks,
    param_count = st.param_count,
    trainable_param_count = st.trainable_count,
    units = { GiB = vram.units.GiB, GB = vram.units.GB },
  }
  for _, c in ipairs(R.ORDER) do
    local v = st.at_peak[c] or 0
    if v ~= 0 then b.breakdown[#b.breakdown + 1] = { category = c, bytes = v } end
  end
  -- the stack's overheads and capacity rules (stdlib/frameworks/), printed
  local fw = frameworks.of(run)
  local gpu = gpus.find(gpu_name or run.gpu)
  b.framework = fw.name
  b.assumptions = frameworks.notes(fw, gpu)
  local xla = require("stdlib.xla")
  local rules = xla.rules(run)
  if rules then
    if rules.fraction ~= fw.prealloc then -- the run's own pool replaces the profile's first line
      b.assumptions[1] = ("XLA's pool: %s=%g of the device"):format(fw.env.fraction, rules.fraction)
    end
    b.assumptions[#b.assumptions + 1] = xla.donation_note(rules)
    if run.ckpt and fw.remat then b.assumptions[#b.assumptions + 1] = fw.remat end
    local t = xla.terms(st)
    if t then
      b.xla = { argument_size_in_bytes = t.arguments, output_size_in_bytes = t.outputs,
        alias_size_in_bytes = t.alias, temp_size_in_bytes = t.temp }
      for _, l in ipairs(xla.lines(t)) do b.assumptions[#b.assumptions + 1] = l end
    end
  end
  for _, a in ipairs(run.model_assumptions or {}) do b.assumptions[#b.assumptions + 1] = a end
  local q = run.quant
  if q and not q.master and require("stdlib.layers").BNB4[q.store] then
    b.assumptions[#b.assumptions + 1] = ("bitsandbytes 4-bit (%s): every decoder projection "
      .. "is a Linear4bit computing in %s, dequantized per matmul in forward and backward; "
      .. "lm_head, embeddings and norms %s"):format(q.store, q.compute,
      q.prepare and ("fp32 (peft's prepare_model_for_kbit_training: the residual stream, "
        .. "attention and logits in fp32, each 4-bit matmul's input cast to " .. q.compute
        .. ")") or ("stay " .. (run.param_dtype or q.compute) .. " (transformers' default; no "
        .. "prepare_model_for_kbit_training)"))
  end
  if q and q.ckpt and q.ckpt.note then b.assumptions[#b.assumptions + 1] = q.ckpt.note end
  -- the load phase (stdlib/load.lua): its own peak, and whether it is the run's
  b.load = require("stdlib.load").summary(st, run)
  if b.load and run.load and run.load.note then
    b.assumptions[#b.assumptions + 1] = run.load.note
  end
  -- three peaks: tensors allocated, allocator reserved, device total
  b.reserved_bytes = st.peak_reserved
  if st.peak_reserved ~= st.peak then
    b.assumptions[#b.assumptions + 1] = "reserved: caching-allocator block rounding, "
      .. "fragmentation not modelled (a lower bound)"
  end
  b.device_total_bytes = frameworks.device_total(fw, st, gpu, run)
  if st.paged_state_bytes then -- unified memory: on the device while resident
    b.paged_optimizer_state_bytes = st.paged_state_bytes
    b.device_total_bytes = b.device_total_bytes + st.paged_state_bytes
    b.assumptions[#b.assumptions + 1] = ("paged optimizer (bitsandbytes): %s of states in "
      .. "CUDA unified memory, outside torch's allocator: not in the allocated or reserved "
      .. "peaks, in the device total while resident (evicted to the host when memory runs "
      .. "short)"):format(vram.fmt(st.paged_state_bytes, "GiB"))
  end
  if gpu then
    b.gpu = { id = gpu.id, name = gpu.name, bytes = gpu.bytes }
    local need, usable = frameworks.need(fw, st.peak_reserved), frameworks.usable(fw, gpu, run)
    b.fits = need <= usable
    b.headroom_bytes = usable - need
  end
  return b
end

local function bar(frac, width)
  local n = math.floor(frac * width + 0.5)
  return string.rep("#", n) .. string.rep(".", width - n)
end

function R.text(b, title)
  local out = {}
  local function add(s) out[#out + 1] = s end
  if title then add(title) end
  add(("peak (tensors allocated): %s = %s  [%d B]"):format(vram.fmt(b.peak_bytes, "GiB"),
    vram.fmt(b.peak_bytes, "GB"), b.peak_bytes))
  add(("  reached in %s%s"):format(b.peak_phase, b.peak_op and (" at " .. b.peak_op) or ""))
  add(("%-16s %16s %11s %6s  %s"):format("component", "bytes", "GiB", "share", ""))
  for _, it in ipairs(b.breakdown) do
    local f = it.bytes / b.peak_bytes
    add(("%-16s %16d %11.3f %5.1f%%  %s"):format(it.category, it.bytes, vram.to(it.bytes, "GiB"),
      f * 100, bar(f, 24)))
  end
  if b.load then
    add(("load: peak %s [%d B] (weights arriving %s); the run's peak is the %s's"):format(
      vram.fmt(b.load.load_peak_bytes, "GiB"), b.load.load_peak_bytes, b.load.how,
      b.load.run_peak))
  end
  add(("allocator reserved: %s; device total (with framework overhead): %s"):format(
    vram.fmt(b.reserved_bytes, "GiB"), vram.fmt(b.device_total_bytes, "GiB")))
  for _, a in ipairs(b.assumptions) do add("  assumption: " .. a) end
  if b.gpu then
    add(("%s on %s (%s): headroom %s"):format(b.fits and "FITS" or "DOES NOT FIT", b.gpu.name,
      vram.fmt(b.gpu.bytes, "GiB"), vram.fmt(b.headroom_bytes, "GiB")))
  end
  return table.concat(out, "\n")
end

function R.markdown(b, title)
  local out = { title and ("### " .. title) or nil }
  out[#out + 1] = ("Peak (tensors allocated): **%s** (%s) in `%s`"):format(
    vram.fmt(b.peak_bytes, "GiB"), vram.fmt(b.peak_bytes, "GB"), b.peak_phase)
  out[#out + 1] = ""
  out[#out + 1] = "| component | bytes | GiB | share |"
  out[#out + 1] = "|---|---:|---:|---:|"
  for _, it in ipairs(b.breakdown) do
    out[#out + 1] = ("| %s | %d | %.3f | %.1f%% |"):format(it.category, it.bytes,
      vram.to(it.bytes, "GiB"), it.bytes / b.peak_bytes * 100)
  end
  return table.concat(out, "\n")
end

function R.csv(b)
  local out = { "component,bytes,gib" }
  for _, it in ipairs(b.breakdown) do
    out[#out + 1] = ("%s,%d,%.6f"):format(it.category, it.bytes, vram.to(it.bytes, "GiB"))
  end
  out[#out + 1] = ("peak,%d,%.6f"):format(b.peak_bytes, vram.to(b.peak_bytes, "GiB"))
  return table.concat(out, "\n")
end

function R.json(b) return vram.json.encode(b, true) end

return R
