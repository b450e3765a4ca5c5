#!/usr/bin/env bash
# Layering: runtime (C) <- stdlib <- models <- scripts. stdlib never
# requires models/ (callers hand it a family or the registry), and no file
# outside a family's own module branches on a family name: the VLM family
# names appear in stdlib/ nowhere, and no shared file compares a
# model_type name.   tests/lib/layering.sh SOURCE_DIR
set -u
src=${1:?usage: layering.sh SOURCE_DIR}
fail=0
if grep -rn 'require("models' "$src/stdlib"; then
  echo "FAIL stdlib requires models/ (above)"; fail=1
fi
if grep -rnE 'qwen2_vl|qwen2_5_vl|qwen3_vl|internvl|paligemma|gemma3|mistral3|pixtral|llava|idefics3|smolvlm|minicpmv|mllama' "$src/stdlib" \
    | grep -vE ':[0-9]+:\s*--'; then
  echo "FAIL stdlib code names a model family (above)"; fail=1
fi
# a model_type's differences live in its family module: the shared blocks
# and simulators (and stdlib) compare no model_type name
names='llama|mistral|qwen2|qwen3|phi3|gemma[0-9a-z_]*|olmo[0-9a-z_]*|glm4?|mixtral|qwen[23]_moe'
names="$names|olmoe|deepseek_v[23]|gpt_oss|yxanul|internlm2|qwen[0-9_]*vl[a-z_]*|internvl[a-z_]*"
names="$names|paligemma|mistral3|llava[a-z_]*|idefics3|smolvlm|minicpmv|mllama"
if grep -rnE "(==|~=) *\"($names)\"" "$src/stdlib" "$src/models/decoder.lua" \
    "$src/models/decoder_lm.lua" "$src/models/causal_lm.lua" "$src/models/siq_vlm.lua" \
    "$src/models/siglip.lua" "$src/models/registry.lua"; then
  echo "FAIL a shared file branches on a model_type name (above)"; fail=1
fi
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
