-- stdlib/resolve.lua: a model named by path, directory, Hugging Face cache
-- (a fixture cache in tests/lua/hub/) or a preset's hub ids.
local vram = require("vram")
local resolve = require("stdlib.resolve")
local registry = require("models.registry")

local root = vram.share_dir
local hub = root .. "/tests/lua/hub"
local REV = "0123456789abcdef0123456789abcdef01234567"
local presets = { presets = registry.PRESETS, preset_path = registry.preset_path }

local function with_cache(dir, fn)
  local saved = vram.hf_hub_cache
  vram.hf_hub_cache = dir
  local ok, err = pcall(fn)
  vram.hf_hub_cache = saved
  if not ok then error(err, 0) end
end

return {
  a_path_to_a_config_json_resolves_as_a_file = function()
    local r = resolve.model(root .. "/examples/configs/llama_3_8b.json")
    T.eq(r.source, "file")
    T.eq(r.config.num_hidden_layers, 32)
  end,
  a_directory_resolves_to_its_config_json = function()
    local dir = hub .. "/models--acme--tiny-qwen2/snapshots/" .. REV
    local r = resolve.model(dir)
    T.eq(r.path, dir .. "/config.json")
    T.eq(r.config.hidden_size, 64)
  end,
  a_relative_path_is_tried_beside_the_naming_file_first = function()
    local r = resolve.model("llama_3_8b.json", { base_dir = root .. "/examples/configs" })
    T.eq(r.path, root .. "/examples/configs/llama_3_8b.json")
  end,
  hub_folder_follows_huggingface_hub = function()
    T.eq(resolve.hub_folder("Qwen/Qwen2.5-7B"), "models--Qwen--Qwen2.5-7B")
    T.ok(resolve.is_hub_id("Qwen/Qwen2.5-7B"))
    T.ok(not resolve.is_hub_id("../x/config.json"))
    T.ok(not resolve.is_hub_id("a/b/c"))
  end,
  a_hub_id_resolves_through_refs_main_of_the_cache = function()
    with_cache(hub, function()
      local r = resolve.model("acme/tiny-qwen2")
      T.eq(r.source, "hf-cache")
      T.eq(r.path, hub .. "/models--acme--tiny-qwen2/snapshots/" .. REV .. "/config.json")
      T.eq(r.config.model_type, "qwen2")
    end)
  end,
  a_full_revision_skips_the_ref = function()
    with_cache(hub, function()
      local path = resolve.hub_cache("acme/tiny-qwen2", REV)
      T.eq(path, hub .. "/models--acme--tiny-qwen2/snapshots/" .. REV .. "/config.json")
    end)
  end,
  a_hub_id_not_cached_falls_back_to_the_preset_recording_it = function()
    with_cache(hub, function()
      local r = resolve.model("Qwen/Qwen2.5-7B", presets)
      T.eq(r.source, "preset")
      T.eq(r.preset, "qwen2_5_7b_instruct")
      -- case-insensitive, as the Hub matches names
      T.eq(resolve.model("qwen/qwen2.5-1.5b-instruct", presets).preset, "qwen2_5_1_5b_instruct")
      T.eq(resolve.model("meta-llama/Meta-Llama-3-8B-Instruct", presets).preset, "llama_3_8b")
    end)
  end,
  the_cache_wins_over_a_preset = function()
    with_cache(hub, function()
      local fake = { { name = "qwen2_5_7b_instruct", hf = { "acme/tiny-qwen2" } } }
      local r = resolve.model("acme/tiny-qwen2",
        { presets = fake, preset_path = registry.preset_path })
      T.eq(r.source, "hf-cache")
    end)
  end,
  nothing_resolving_names_the_three_fixes = function()
    with_cache(hub, function()
      local msg = T.raises(function()
        resolve.model("acme/unknown-7b", { where = "train.yaml", field = "model_name_or_path",
          presets = registry.PRESETS, preset_path = registry.preset_path })
      end, "train.yaml: model_name_or_path: cannot resolve model 'acme/unknown-7b'")
      T.ok(msg:find("--model CONFIG.json", 1, true), "fix 1: --model")
      T.ok(msg:find("huggingface-cli download acme/unknown-7b config.json", 1, true),
        "fix 2: the cache")
      T.ok(msg:find("models/registry.lua", 1, true), "fix 3: a preset")
      T.ok(msg:find(hub .. "/models--acme--unknown-7b/refs/main", 1, true), "says where it looked")
    end)
  end,
  every_preset_hub_id_is_unique = function()
    local seen = {}
    for _, p in ipairs(registry.PRESETS) do
      for _, id in ipairs(p.hf) do
        T.ok(not seen[id:lower()], id .. " recorded twice")
        seen[id:lower()] = true
      end
    end
  end,
}
