#!/bin/sh
# vLLM: serve Qwen2.5-7B-Instruct on one GPU with an fp8 KV cache.
vllm serve Qwen/Qwen2.5-7B-Instruct \
  --gpu-memory-utilization 0.90 \
  --max-model-len 32768 \
  --max-num-seqs 128 \
  --max-num-batched-tokens 8192 \
  --kv-cache-dtype fp8 \
  --block-size 16 \
  --port 8000 --served-model-name qwen
