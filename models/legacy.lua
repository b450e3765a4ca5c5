-- LEGACY: families added before the family contract (models/README.md) and
-- not ported to it yet. Each is wrapped here into a family module: read
-- keeps the raw config, params calls the module's old counting function,
-- and a VLM's simulator goes through models/vlm_shapes.lua with the image
-- rules below. Porting one means writing read/params/simulator/image_tokens
-- in its own module and giving its registry entry a plain `module`; this
-- file and vlm_shapes.lua shrink to nothing.
local errors = require("stdlib.errors")
local vt = require("stdlib.vision_tokens")
local decoder = require("models.decoder")
local shapes = require("models.vlm_shapes")
local siq = require("models.siq_vlm")
local qwen2_vl = require("models.qwen2_vl")

local L = {}

-- The image grid and image count of a legacy VLM (the rules its family
-- module does not hold yet). Returns the shape and images per sample.
local function shape_of(name, cfg, where, images)
  local count, h, w = images.count, images.height, images.width
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required for a VLM")
  if name == "qwen2_5_vl" then -- Qwen2-VL's image processor (patch 14, merge 2)
    local t = vt.dynamic_grid(h, w, { patch_size = 14, merge_size = 2,
      min_pixels = qwen2_vl.PROCESSOR.min_pixels,
      max_pixels = images.max_pixels or qwen2_vl.PROCESSOR.max_pixels })
    local shape = shapes.shape(cfg, where, t.factor, name)
    shape.vision.grid_h, shape.vision.grid_w = t.grid[2], t.grid[3]
    return shape, count
  end
  if name == "llava" and cfg.model_type == "llava" and vc.model_type == "pixtral" then
    -- LLaVA with a Pixtral tower (Pixtral-12B): Pixtral's own resolution
    -- rule, no spatial merge
    local t = vt.longest_edge_grid(h, w, { longest_edge = vc.image_size or 1024,
      patch_size = vc.patch_size or 16, merge_size = 1 })
    local shape = shapes.shape(cfg, where, vc.patch_size or 16, name)
    shape.vision.grid_h, shape.vision.grid_w = t.rows, t.cols
    return shape, count
  elseif name == "llava" and cfg.model_type ~= "llava" then
    errors.input(where, "model_type", ("%s's any-resolution tiling (a base image plus grid "
      .. "tiles and newline tokens) is not simulated yet; `vramlua params` counts the model")
      :format(tostring(cfg.model_type)))
  end
  -- fixed-resolution towers: every image becomes one (or one per tile)
  local side = vc.image_size or cfg.force_image_size or 224
  if type(side) == "table" then side = side[1] end -- [h, w] (square towers)
  if name == "minicpmv" then -- the source image plus its slices, 448 each
    side = (cfg.slice_config or {}).scale_resolution or 448
    count = count * require("models.minicpmv").crops(cfg, h, w)
  elseif name == "idefics3" then -- image splitting: tiles plus a global image
    side = vc.image_size or 224
    count = count * require("models.idefics3").tiles(cfg, h, w)
  end
  return shapes.shape(cfg, where, side, name), count
end

-- e = { name, module, fn (its counting function, default count), about,
--       vlm (simulated through models/siq_vlm.lua), refuse (why it is not
--       simulated) }
function L.family(e)
  local mod = require(e.module)
  local F = { name = e.name, about = e.about }
  function F.read(cfg, where) return { cfg = cfg, where = where } end
  function F.params(m)
    local r = mod[e.fn or "count"](m.cfg, m.where)
    return { parts = r.parts, tied_duplicate = r.tied_duplicate or 0 }
  end
  if e.refuse then
    F.simulator = function(m) errors.input(m.where, "model_type", e.refuse) end
  elseif e.vlm then
    function F.simulator(m, images)
      local shape, count = shape_of(e.name, m.cfg, m.where, images)
      return { sim = siq, text = decoder.read(shape.text, m.where, "text_config."),
        vision = shape.vision,
        vlm = { pixel_shuffle_factor = shape.merge, projector_hidden_act = "gelu",
          multimodal_projector_bias = true, deepstack = shape.deepstack, images = count } }
    end
    -- the tokens of one image as the simulator lays them out
    function F.image_tokens(m, image)
      local shape, count = shape_of(e.name, m.cfg, m.where,
        { count = 1, height = image.height, width = image.width, max_pixels = image.max_pixels })
      local v, f = shape.vision, shape.merge or 1
      local gh = v.grid_h or v.image_size // v.patch_size
      local gw = v.grid_w or v.image_size // v.patch_size
      return { tokens = count * (gh // f) * (gw // f) }
    end
  end
  return F
end

return L
