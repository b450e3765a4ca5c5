-- stdlib/vision_tokens.lua's rules and each VLM family's image_tokens
-- (models/<family>.lua, the processor's settings): image -> token counts,
-- checked against figures worked out by hand from each processor's
-- published rules.
local vram = require("vram")
local V = require("stdlib.vision_tokens")

-- A family and its model, read from a preset in examples/configs/.
local function family(module, preset)
  local fam = require(module)
  local path = vram.share_dir .. "/examples/configs/" .. preset .. ".json"
  local m = fam.read(vram.json.load(path), path)
  -- image_tokens(height, width [, settings]) as the rules read
  return function(height, width, settings)
    local image = { height = height, width = width }
    for k, v in pairs(settings or {}) do image[k] = v end
    return fam.image_tokens(m, image)
  end
end
local qwen2_vl = family("models.qwen2_vl", "qwen2_vl_2b_instruct")
local qwen3_vl = family("models.qwen3_vl", "qwen3_vl_4b_instruct")
local internvl = family("models.internvl", "internvl2_2b")
local mistral3 = family("models.mistral3", "mistral_small_3_1_24b_instruct_2503")

T.test("Python round() sends halves to the even neighbour", function()
  T.eq(V.round_half_even(2.5), 2)
  T.eq(V.round_half_even(1.5), 2)
  T.eq(V.round_half_even(3.5), 4)
  T.eq(V.round_half_even(2.4999), 2)
  T.eq(V.round_half_even(2.51), 3)
end)

T.test("Qwen2-VL: 672x672 is a 48x48 patch grid merged 2x2 into 576 tokens", function()
  -- 672 / 28 = 24 exactly, 672^2 = 451,584 <= 28*28*1280 = 1,003,520
  local r = qwen2_vl(672, 672)
  T.eq(r.tokens, 576)
  T.eq(r.resized, { 672, 672 })
  T.eq(r.grid, { 1, 48, 48 })
end)

T.test("Qwen2-VL rounds halves to even and clamps to max_pixels", function()
  -- 70/28 = 2.5 -> 2, 42/28 = 1.5 -> 2: 56 x 56 = 3136 = min_pixels, not below
  T.eq(qwen2_vl(70, 42).tokens, 4)
  T.eq(qwen2_vl(70, 42).resized, { 56, 56 })
  -- 2000 x 2000 = 4e6 px > 1,003,520: beta = sqrt(4e6 / 1003520) = 1.99647...
  -- floor(2000 / 1.99647 / 28) = floor(35.78) = 35 -> 980; 70 x 70 / 4 = 1225
  T.eq(qwen2_vl(2000, 2000).resized, { 980, 980 })
  T.eq(qwen2_vl(2000, 2000).tokens, 1225)
end)

T.test("Qwen3-VL gives about one token per 1024 pixels", function()
  -- factor 32: 1024 / 32 = 32 -> 64 x 64 patches of 16 -> 4096 / 4
  T.eq(qwen3_vl(1024, 1024).tokens, 1024)      -- 1,048,576 px / 1024
  -- 480 / 32 = 15, 640 / 32 = 20 -> 30 x 40 patches -> 300
  T.eq(qwen3_vl(480, 640).tokens, 300)         -- 307,200 px / 1024
  -- 700 / 32 = 21.875 -> 22 -> 704; 1000 / 32 = 31.25 -> 31 -> 992
  -- 44 x 62 patches / 4 = 682 (683.6 = 700,000 / 1024 before rounding)
  T.eq(qwen3_vl(700, 1000).resized, { 704, 992 })
  T.eq(qwen3_vl(700, 1000).tokens, 682)
  -- 8192^2 px > 4096^2: beta = 2 -> 4096 x 4096 -> 256 x 256 / 4
  T.eq(qwen3_vl(8192, 8192).tokens, 16384)     -- 16,777,216 / 1024
  -- 100 x 100 -> 96 x 96 < 65,536: beta = sqrt(65536 / 10000) = 2.56,
  -- ceil(100 * 2.56 / 32) = 8 -> 256 x 256 -> 16 x 16 / 4
  T.eq(qwen3_vl(100, 100).tokens, 64)          -- 65,536 / 1024
  -- 150 x 200: beta = sqrt(65536 / 30000) = 1.4780; ceil(6.93) = 7 -> 224,
  -- ceil(9.24) = 10 -> 320; 14 x 20 / 4
  T.eq(qwen3_vl(150, 200).tokens, 70)
end)

T.test("fixed-resolution SigLIP: (image // patch)^2", function()
  T.eq(V.fixed(224, 14).tokens, 256)   -- PaliGemma-3b-224
  T.eq(V.fixed(512, 16).tokens, 1024)  -- SigLIP2 So400m/16 at 512
  T.eq(V.fixed(384, 14).tokens, 729)  -- the stride-14 conv floors 384 / 14 to 27
  T.raises(function() V.fixed(8, 16) end, "must be at least patch_size")
end)

T.test("pixel shuffle factors on a 32x32 grid", function()
  local got = {}
  for _, f in ipairs({ 1, 2, 4, 8, 16, 32 }) do got[#got + 1] = V.pixel_shuffle(32, f) end
  T.eq(got, { 1024, 256, 64, 16, 4, 1 })
  T.raises(function() V.pixel_shuffle(32, 3) end, "must divide the 32x32 patch grid, got 3")
end)

T.test("InternVL: 256 tokens per 448 tile after the 0.5 pixel shuffle", function()
  -- (448 / 14)^2 * 0.5^2 = 1024 / 4
  local one = internvl(448, 448)
  T.eq(one.per_tile, 256)
  T.eq(one.tiles, 1)            -- 1x1: no thumbnail
  T.eq(one.image_tokens, 256)
  T.eq(one.tokens, 258)         -- + <img> and </img>
  -- 1920 x 1080: aspect 1.778; (2,1) and (4,2) tie at 2.0 (|diff| 0.222);
  -- area 2,073,600 > 0.5 * 448^2 * 8 = 802,816, so (4,2) wins: 8 tiles +
  -- a thumbnail = 9 tiles = 2304 tokens
  local hd = internvl(1080, 1920)
  T.eq({ hd.cols, hd.rows, hd.thumbnail, hd.tiles }, { 4, 2, 1, 9 })
  T.eq(hd.image_tokens, 2304)
  -- 1000 x 800 (aspect 1.25): best within 12 tiles is (4,3) = 1.333
  local w = internvl(800, 1000)
  T.eq({ w.cols, w.rows, w.tiles }, { 4, 3, 13 })
  -- max_num 6: (3,2) = 1.5 vs (1,1) ... (2,2): 1.25 is closest to (1,1)x(2,2) = 1
  -- at 0.25 and to (3,2) at 0.25: equal, area 800,000 > 0.5*448^2*6 = 602,112
  T.eq(internvl(800, 1000, { max_num = 6 }).blocks, 6)
end)

T.test("Mistral Small 3.1: 1540x1540 is 3025 image tokens (3080 with separators)", function()
  -- 1540 / 14 = 110 patches a side, merged 2x2 -> 55 x 55 = 3025 [IMG];
  -- each of the 55 rows ends in [IMG_BREAK], the last one becomes [IMG_END]
  local r = mistral3(1540, 1540)
  T.eq(r.image_tokens, 3025)
  T.eq(r.breaks, 54)
  T.eq(r.ends, 1)
  T.eq(r.tokens, 3080)
  -- longest edge resized to 1540: 3080 x 2000 -> ratio 2 -> 1540 x 1000;
  -- 1000 -> 72 patches (ceil) = 1008 px -> 1008 // 28 = 36 columns
  local w = mistral3(3080, 2000)
  T.eq(w.resized, { 1540, 1008 })
  T.eq(w.image_tokens, 55 * 36)
  T.eq(w.tokens, 55 * 36 + 55)
end)

T.test("bad images are input errors", function()
  T.raises(function() qwen2_vl(10, 500) end, "must be at least the factor 28")
  T.raises(function() qwen2_vl(28, 28 * 201) end, "aspect ratio must be smaller than 200")
  T.raises(function() qwen3_vl(0, 64) end, "height")
end)

T.test("a rule without its processor settings is an input error", function()
  T.raises(function() V.dynamic_grid(448, 448, { patch_size = 14 }) end,
    "merge_size: is required by the dynamic-resolution rule")
  T.raises(function() V.longest_edge_grid(448, 448) end,
    "longest_edge: is required by the longest-edge rule")
end)
