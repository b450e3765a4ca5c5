-- How many tokens an image becomes: the image processors' published rules
-- as algorithms. Every function takes the image's height and width in
-- pixels (as the processor sees them) and the processor's settings, all
-- required: the settings of a model (its patch size, its processor's
-- defaults) live in its family module (models/<family>.lua, `image_tokens`),
-- never here. Results are tables whose `tokens` field is the number of
-- positions the image occupies in the language model's sequence; the other
-- fields show how that number was reached.
--
-- Float arithmetic is done in the same order as the Python it mirrors, so
-- the IEEE-754 results (and the roundings that follow) are the same.
local errors = require("stdlib.errors")

local M = {}

local function posint(v, what)
  if math.type(v) ~= "integer" then
    if type(v) == "number" and v == math.floor(v) then
      v = math.tointeger(v)
    else
      errors.input("vision_tokens", what, "must be a positive integer, got " .. tostring(v))
    end
  end
  if v < 1 then errors.input("vision_tokens", what, "must be >= 1, got " .. tostring(v)) end
  return v
end

-- Python's round() on a float: halves go to the even neighbour.
function M.round_half_even(x)
  local f = math.floor(x)
  local d = x - f
  if d > 0.5 then return f + 1 end
  if d < 0.5 then return f end
  return (f % 2 == 0) and f or f + 1
end
local round = M.round_half_even

-- ---------------------------------------------------------------------------
-- Qwen2-VL / Qwen2.5-VL / Qwen3-VL dynamic resolution.
-- transformers src/transformers/models/qwen2_vl/image_processing_qwen2_vl.py,
-- smart_resize():
--   h_bar = round(height / factor) * factor
--   w_bar = round(width / factor) * factor
--   if h_bar * w_bar > max_pixels:
--       beta = math.sqrt((height * width) / max_pixels)
--       h_bar = max(factor, math.floor(height / beta / factor) * factor)
--       w_bar = max(factor, math.floor(width / beta / factor) * factor)
--   elif h_bar * w_bar < min_pixels:
--       beta = math.sqrt(min_pixels / (height * width))
--       h_bar = math.ceil(height * beta / factor) * factor
--       w_bar = math.ceil(width * beta / factor) * factor
-- (the max(factor, ...) guard is in current transformers; older releases
-- lack it and only differ for images with an aspect ratio near 200:1).
-- factor = patch_size * merge_size; the processor rejects images whose
-- shorter side is below factor or whose aspect ratio exceeds 200.
-- ---------------------------------------------------------------------------
function M.smart_resize(height, width, factor, min_pixels, max_pixels)
  height, width = posint(height, "height"), posint(width, "width")
  if height < factor or width < factor then
    errors.input("vision_tokens", "image", ("height %d or width %d must be at least the factor %d")
      :format(height, width, factor))
  end
  if math.max(height, width) / math.min(height, width) > 200 then
    errors.input("vision_tokens", "image", "absolute aspect ratio must be smaller than 200")
  end
  local h_bar = round(height / factor) * factor
  local w_bar = round(width / factor) * factor
  if h_bar * w_bar > max_pixels then
    local beta = math.sqrt((height * width) / max_pixels)
    h_bar = math.max(factor, math.floor(height / beta / factor) * factor)
    w_bar = math.max(factor, math.floor(width / beta / factor) * factor)
  elseif h_bar * w_bar < min_pixels then
    local beta = math.sqrt(min_pixels / (height * width))
    h_bar = math.ceil(height * beta / factor) * factor
    w_bar = math.ceil(width * beta / factor) * factor
  end
  return math.tointeger(h_bar), math.tointeger(w_bar)
end

-- Settings a rule needs, checked: o[k] for each k in keys must be present.
local function settings(o, keys, rule)
  for _, k in ipairs(keys) do
    if o == nil or o[k] == nil then
      errors.input("vision_tokens", k, "is required by the " .. rule .. " rule")
    end
  end
  return o
end

-- One image through the Qwen2-VL processor (Qwen2-VL, Qwen2.5-VL,
-- Qwen3-VL): the grid of patches (grid_t is 1 for a still image: it is
-- repeated to temporal_patch_size frames, which the Conv3d folds into one),
-- then merge x merge patches become one token.
-- o = {patch_size, merge_size, min_pixels, max_pixels}
function M.dynamic_grid(height, width, o)
  settings(o, { "patch_size", "merge_size", "min_pixels", "max_pixels" }, "dynamic-resolution")
  local patch, merge = o.patch_size, o.merge_size
  local factor = patch * merge
  local h_bar, w_bar = M.smart_resize(height, width, factor, o.min_pixels, o.max_pixels)
  local gh, gw = h_bar // patch, w_bar // patch
  local tokens = gh * gw // (merge * merge)
  return { tokens = tokens, resized = { h_bar, w_bar }, grid = { 1, gh, gw },
    patches = gh * gw, factor = factor }
end

-- ---------------------------------------------------------------------------
-- Fixed-resolution ViTs (SigLIP, PaliGemma): every image is resized to
-- image_size x image_size, so the count does not depend on the input:
-- (image_size // patch_size)^2 -- the patch Conv2d's stride floors, so
-- SigLIP So400m/14 at 384 has 27 x 27 = 729 patches (num_patches in
-- modeling_siglip.py: (image_size // patch_size) ** 2) -- optionally
-- reduced by a pixel shuffle.
-- ---------------------------------------------------------------------------
function M.fixed(image_size, patch_size)
  image_size, patch_size = posint(image_size, "image_size"), posint(patch_size, "patch_size")
  if image_size < patch_size then
    errors.input("vision_tokens", "image_size", ("must be at least patch_size (%d), got %d")
      :format(patch_size, image_size))
  end
  local g = image_size // patch_size
  return { tokens = g * g, grid = { g, g } }
end

-- Pixel shuffle (Idefics3 / SmolVLM / InternVL): a factor f folds f x f
-- neighbouring patches into one token, so a g x g grid gives (g/f)^2
-- tokens; f must divide g. On a 32 x 32 grid: f = 1, 2, 4, 8, 16, 32 give
-- 1024, 256, 64, 16, 4, 1.
function M.pixel_shuffle(grid, factor)
  grid, factor = posint(grid, "grid"), posint(factor, "factor")
  if grid % factor ~= 0 then
    errors.input("vision_tokens", "factor", ("must divide the %dx%d patch grid, got %d")
      :format(grid, grid, factor))
  end
  local g = grid // factor
  return g * g
end

-- ---------------------------------------------------------------------------
-- InternVL dynamic tiling: the model card's / repository's
-- dynamic_preprocess() and find_closest_aspect_ratio() (OpenGVLab/InternVL,
-- internvl_chat/internvl/train/dataset.py; the same code is in every
-- InternVL2/2.5/3 model card):
--   target_ratios: every (i, j) with min_num <= i*j <= max_num, sorted by i*j
--   the ratio closest to width/height wins; on a tie the later one wins when
--   area > 0.5 * image_size^2 * i * j
--   blocks = i * j tiles of image_size, plus one thumbnail when blocks > 1
--   and use_thumbnail.
-- (What each tile becomes is the model's: models/internvl.lua.)
-- Python iterates a set before its stable sort, so among ratios with the
-- same i*j the order is CPython's set order; here it is (i, j) ascending.
-- The two differ only when two ratios with the same tile count are exactly
-- equally close to the aspect ratio.
-- ---------------------------------------------------------------------------
-- o = {image_size, min_num, max_num, use_thumbnail}
function M.tiles(height, width, o)
  settings(o, { "image_size", "min_num", "max_num", "use_thumbnail" }, "dynamic tiling")
  height, width = posint(height, "height"), posint(width, "width")
  local ratios = {}
  for i = 1, o.max_num do
    for j = 1, o.max_num do
      local p = i * j
      if p >= o.min_num and p <= o.max_num then ratios[#ratios + 1] = { i, j } end
    end
  end
  table.sort(ratios, function(a, b)
    local pa, pb = a[1] * a[2], b[1] * b[2]
    if pa ~= pb then return pa < pb end
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  local aspect = width / height
  local area = width * height
  local best, best_diff = { 1, 1 }, math.huge
  for _, r in ipairs(ratios) do
    local diff = math.abs(aspect - r[1] / r[2])
    if diff < best_diff then
      best_diff, best = diff, r
    elseif diff == best_diff and area > 0.5 * o.image_size * o.image_size * r[1] * r[2] then
      best = r
    end
  end
  local blocks = best[1] * best[2]
  local thumb = (o.use_thumbnail and blocks ~= 1) and 1 or 0
  return { cols = best[1], rows = best[2], blocks = blocks, thumbnail = thumb,
    tiles = blocks + thumb }
end

-- ---------------------------------------------------------------------------
-- Pixtral / Mistral Small 3.1 (Mistral3).
-- transformers src/transformers/models/pixtral/image_processing_pixtral.py,
-- get_resize_output_image_size(): ratio = max(height / longest_edge,
-- width / longest_edge); if ratio > 1 both sides are floored after dividing
-- by it; then each side is rounded up to whole patches:
-- ((side - 1) // patch + 1) * patch.
-- transformers src/transformers/models/mistral3/processing_mistral3.py:
--   num_height_tokens = height // (patch_size * spatial_merge_size)
--   num_width_tokens = width // (patch_size * spatial_merge_size)
--   each row is [IMG] * num_width_tokens + [IMG_BREAK]; the last
--   [IMG_BREAK] is replaced by [IMG_END].
-- Pixtral-12B (merge 1, patch 16, longest edge 1024) and Mistral Small 3.x
-- (models/mistral3.lua) use these rules.
-- o = {longest_edge, patch_size, merge_size}
-- ---------------------------------------------------------------------------
function M.longest_edge_grid(height, width, o)
  settings(o, { "longest_edge", "patch_size", "merge_size" }, "longest-edge")
  height, width = posint(height, "height"), posint(width, "width")
  local h, w = height, width
  local ratio = math.max(h / o.longest_edge, w / o.longest_edge)
  if ratio > 1 then
    h = math.floor(h / ratio)
    w = math.floor(w / ratio)
  end
  local p = o.patch_size
  local ph, pw = (h - 1) // p + 1, (w - 1) // p + 1
  local rh, rw = ph * p, pw * p
  local unit = p * o.merge_size
  local th, tw = rh // unit, rw // unit
  local image = th * tw
  return { tokens = image + th, image_tokens = image, rows = th, cols = tw,
    breaks = th - 1, ends = 1, resized = { math.tointeger(rh), math.tointeger(rw) } }
end

-- ---------------------------------------------------------------------------
-- Idefics3 / SmolVLM image splitting.
-- transformers src/transformers/models/idefics3/image_processing_idefics3.py:
--   resize (size = {"longest_edge": L}): _resize_output_size_rescale_to_max_len
--     the longer side becomes L, the other int(L / aspect) (or int(L *
--     aspect)), rounded up to even; then _resize_output_size_scale_below_upper_bound
--     keeps both sides <= MAX_IMAGE_SIZE (4096) the same way (no even rounding)
--   resize_for_vision_encoder (max_image_size = {"longest_edge": tile}):
--     the longer side rounded up to a multiple of tile, the other int(longer /
--     aspect) rounded up to a multiple of tile
--   split_image: when a side exceeds tile, ceil(h / tile) x ceil(w / tile)
--     tiles plus the whole image resized to tile x tile; else one image.
-- o = {longest_edge, tile, max_image_size (4096 in transformers)}
-- ---------------------------------------------------------------------------
local function scale_longest(h, w, max_len, even)
  local aspect = w / h
  if w >= h then
    if even or w > max_len then
      w = max_len
      h = math.floor(w / aspect)
      if even and h % 2 ~= 0 then h = h + 1 end
    end
  else
    if even or h > max_len then
      h = max_len
      w = math.floor(h * aspect)
      if even and w % 2 ~= 0 then w = w + 1 end
    end
  end
  return math.max(h, 1), math.max(w, 1)
end

function M.longest_edge_split(height, width, o)
  settings(o, { "longest_edge", "tile", "max_image_size" }, "image-splitting")
  height, width = posint(height, "height"), posint(width, "width")
  local tile = posint(o.tile, "tile")
  local h, w = scale_longest(height, width, posint(o.longest_edge, "longest_edge"), true)
  h, w = scale_longest(h, w, o.max_image_size, false)
  local aspect = w / h
  if w >= h then
    w = math.ceil(w / tile) * tile
    h = math.ceil(math.floor(w / aspect) / tile) * tile
  else
    h = math.ceil(h / tile) * tile
    w = math.ceil(math.floor(h * aspect) / tile) * tile
  end
  h, w = math.tointeger(h), math.tointeger(w)
  local rows, cols = 0, 0
  if h > tile or w > tile then rows, cols = (h + tile - 1) // tile, (w + tile - 1) // tile end
  return { rows = rows, cols = cols, resized = { h, w },
    tiles = rows * cols + 1 } -- the global image (or the only one)
end

-- ---------------------------------------------------------------------------
-- LLaVA-NeXT / LLaVA-OneVision any-resolution tiling.
-- transformers src/transformers/image_processing_utils.py,
-- select_best_resolution(): for each (height, width) of the grid pinpoints,
--   scale = min(width / orig_w, height / orig_h); the downscaled image
--   int(orig_w * scale) x int(orig_h * scale) gives effective =
--   min(that area, orig area) and wasted = height * width - effective; the
--   largest effective wins, ties to the least wasted.
-- processing_llava_next.py / processing_llava_onevision.py,
-- _get_number_of_features(): the best resolution in tiles of the tower's
-- side, scale_h x scale_w; the tiles' patch grid (grid * scale per side)
-- is unpadded to the image's aspect, with one newline feature per row:
--   if orig_w / orig_h > cur_w / cur_h: new_h = orig_h * cur_w // orig_w
--     (OneVision: int(round(orig_h * (cur_w / orig_w), 7))), and cur_h
--     loses 2 * ((cur_h - new_h) // 2); else the same for the width.
--   OneVision (vision_aspect_ratio "anyres_max_N"): when ratio =
--     sqrt(cur_h * cur_w / (N * grid^2)) > 1.1 the features are
--     downsampled to int(cur_h // ratio) x int(cur_w // ratio).
--   base: the whole image resized to one tile, grid^2 features.
-- o = {pinpoints = {{h, w}...}, tile, grid, max_tiles (OneVision's N, or
--      nil), rounded (true: OneVision's round(..., 7))}
-- Returns features = base + unpadded + newlines (before any CLS handling).
-- ---------------------------------------------------------------------------
function M.select_best_resolution(height, width, pinpoints)
  local best, best_eff, best_waste = nil, 0, math.huge
  for i, p in ipairs(pinpoints) do
    if type(p) ~= "table" or math.type(p[1]) ~= "integer" or math.type(p[2]) ~= "integer"
      or p[1] < 1 or p[2] < 1 then
      errors.input("vision_tokens", "image_grid_pinpoints[" .. i .. "]",
        "must be a [height, width] pair of positive integers")
    end
    local ph, pw = p[1], p[2]
    local scale = math.min(pw / width, ph / height)
    local dw, dh = math.floor(width * scale), math.floor(height * scale)
    local eff = math.min(dw * dh, width * height)
    local waste = ph * pw - eff
    if eff > best_eff or (eff == best_eff and waste < best_waste) then
      best, best_eff, best_waste = p, eff, waste
    end
  end
  if not best then errors.input("vision_tokens", "image_grid_pinpoints", "is empty") end
  return best[1], best[2]
end

function M.anyres(height, width, o)
  settings(o, { "pinpoints", "tile", "grid" }, "any-resolution")
  height, width = posint(height, "height"), posint(width, "width")
  local bh, bw = M.select_best_resolution(height, width, o.pinpoints)
  local sh, sw = bh // o.tile, bw // o.tile
  local ch, cw = o.grid * sh, o.grid * sw
  local function scaled(a, num, den)
    if o.rounded then -- int(round(a * (num / den), 7))
      return math.floor(a * (num / den) + 5e-8)
    end
    return a * num // den
  end
  if width / height > cw / ch then
    local nh = scaled(height, cw, width)
    ch = ch - 2 * ((ch - nh) // 2)
  else
    local nw = scaled(width, ch, height)
    cw = cw - 2 * ((cw - nw) // 2)
  end
  local unpadded, newlines = ch * cw, ch
  if o.max_tiles then
    local ratio = math.sqrt(ch * cw / (o.max_tiles * o.grid * o.grid))
    if ratio > 1.1 then
      unpadded = math.floor(ch // ratio) * math.floor(cw // ratio)
      newlines = math.floor(ch // ratio)
    end
  end
  local base = o.grid * o.grid
  return { best = { bh, bw }, tiles = sh * sw + 1, grid = { sh, sw },
    unpadded = math.tointeger(unpadded), newlines = math.tointeger(newlines), base = base,
    features = math.tointeger(base + unpadded + newlines) }
end

return M
