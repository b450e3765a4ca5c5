local spec = require("stdlib.spec")
local vram = require("vram")
local run = spec.normalize({ model = { preset = "qwen3_vl_4b_instruct", text_only = true }, run = {
  mode = "train", batch = 16, seq = 2211, framework = "jax", precision = { params = "bf16", master = "fp32" },
  optimizer = { name = "adamw", state_dtype = "fp32" }, loss = "one_hot" } }, vram.share_dir .. "/x.lua", require("models.registry"))
local keys = {}
for k, v in pairs(run.text) do keys[#keys+1] = k .. "=" .. tostring(v) end
table.sort(keys) print(table.concat(keys, " "))
print(run.sim == require("models.causal_lm"))
local t0 = os.clock()
local st = require("stdlib.step").run(run)
print(os.clock() - t0, st.peak / 2^30, st.param_count)
