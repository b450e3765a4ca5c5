-- Gemma 3 multimodal (model_type gemma3), counts read off transformers
-- modeling_gemma3.py:
--   vision_tower   SiglipVisionModel (models/siglip.lua; the published
--                  configs set vision_use_head false)
--   multi_modal_projector  Gemma3MultiModalProjector:
--                  mm_input_projection_weight, a (vision hidden, text hidden)
--                  Parameter; mm_soft_emb_norm, Gemma3RMSNorm(vision hidden);
--                  an AvgPool2d from (image/patch)^2 patches down to
--                  mm_tokens_per_image (no parameters)
--   language_model Gemma 3 text (models/decoder.lua's gemma3_text), lm_head
--                  tied
-- gemma-3-4b-it: 416,866,032 vision + 2,950,272 projector + 3,880,263,168
-- text = 4,300,079,472.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local siglip = require("models.siglip")
local decoder = require("models.decoder")
local siq = require("models.siq_vlm")

local F = { name = "gemma3",
  about = "Gemma 3 multimodal: SigLIP + pooled projector + Gemma 3 text (models/gemma3.lua)" }

-- Gemma3TextConfig defaults (configuration_gemma3.py) for keys a
-- text_config leaves out.
local TEXT_DEFAULTS = { vocab_size = 262208, hidden_size = 2304, intermediate_size = 9216,
  num_hidden_layers = 26, num_attention_heads = 8, num_key_value_heads = 4, head_dim = 256 }

function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local c = cfgutil.reader(cfg, where)
  local tie = type(tc) == "table" and tc.tie_word_embeddings
  if tie == nil then tie = c:bool("tie_word_embeddings", true) end -- Gemma3Config: True
  local m = { where = where, vision = siglip.read_config(vc, where, "vision_config."),
    text = decoder.read_nested(tc, where, "text_config.", { model_type = "gemma3_text",
      tie_word_embeddings = tie }, TEXT_DEFAULTS),
    -- Gemma3Config: mm_tokens_per_image 256
    mm_tokens = c:int("mm_tokens_per_image", 256) }
  -- the pool: patches_per_image / tokens_per_side per side
  local grid = m.vision.grid
  local k = math.tointeger(math.sqrt(m.mm_tokens))
  if not k or k * k ~= m.mm_tokens or grid % k ~= 0 then
    c:fail("mm_tokens_per_image", ("must be a square whose side divides the %dx%d patch grid, "
      .. "got %d"):format(grid, grid, m.mm_tokens))
  end
  m.pool = grid // k
  return m
end

function F.params(m)
  local parts = siglip.parts(m.vision, "vision_tower.vision_model.")
  parts[#parts + 1] = { name = "multi_modal_projector", tower = "projector",
    params = vram.add(vram.mul(m.vision.hidden, m.text.hidden),
      vram.norm_params(m.vision.hidden, "rms")) }
  return P.followed_by(parts, decoder.params(m.text, "language_model."))
end

-- Gemma3ImageProcessor resizes every image to image_size x image_size
-- (pan-and-scan crops are off by default: do_pan_and_scan False); the
-- projector pools it to mm_tokens_per_image soft tokens. Gemma3Processor
-- replaces the image's <start_of_image> with "\n\n<start_of_image>" +
-- <image_soft_token> x 256 + "<end_of_image>\n\n": the soft tokens plus
-- boi, eoi and two "\n\n" tokens (one token each in Gemma 3's vocabulary).
function F.image_tokens(m)
  return { tokens = m.mm_tokens + 4, image_tokens = m.mm_tokens, grid = { m.vision.grid,
    m.vision.grid }, pool = m.pool }
end

-- The average pool is simulated as a pixel shuffle of the same factor (the
-- same rows out) and the one-matrix projector as the two-layer one.
function F.simulator(m, images)
  local v = m.vision
  local d = siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = v.image,
    merge = m.pool, images = images.count,
    tokens = F.image_tokens(m).tokens * images.count })
  d.assumptions = { ("gemma3: the %dx%d average pool is simulated as a pixel shuffle and the "
    .. "projector matrix as a two-layer GELU MLP"):format(m.pool, m.pool) }
  return d
end

return F
