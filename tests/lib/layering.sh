#!/usr/bin/env bash
# Layering: runtime (C) <- stdlib <- models <- scripts. stdlib never
# requires models/ (callers hand it a family or the registry), and no file
# outside a family's own module branches on a family name: the VLM family
# names appear in stdlib/ nowhere.   tests/lib/layering.sh SOURCE_DIR
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
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
