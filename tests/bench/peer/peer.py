"""llm-analysis timed on a decoder config (tests/bench/run.sh runs it).

usage: /usr/bin/python3 peer.py [--once] SECONDS NAME LAYERS HEADS KV_HEADS HIDDEN FFN VOCAB
                                BATCH SEQ RECOMPUTE
Prints the CPU time of one training-memory estimate (LLMAnalysis + training(),
bf16 weights and activations, flash attention, RECOMPUTE = its
ActivationRecomputation value, 4 = full), averaged over SECONDS of process
CPU time. --once: one estimate and its peak, for timing a whole process.
llm-analysis is vendored beside this file (see README.md).
"""
import logging
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "stub"), HERE]

from llm_analysis.analysis import ActivationRecomputation, LLMAnalysis  # noqa: E402
from llm_analysis.config import (ModelConfig, ParallelismConfig,  # noqa: E402
                                 get_dtype_config_by_name,
                                 get_gpu_config_by_name)
from llm_analysis.logger import logger  # noqa: E402


def main(argv):
    once = argv[:1] == ["--once"]
    if once:
        argv = argv[1:]
    secs = float(argv[0])
    name = argv[1]
    layers, heads, kv, hidden, ffn, vocab, batch, seq, recompute = (int(v) for v in argv[2:11])
    logger.setLevel(logging.ERROR)  # its per-estimate notes and summaries, unprinted
    model = ModelConfig(name=name, num_layers=layers, n_head=heads, hidden_dim=hidden,
                        vocab_size=vocab, max_seq_len=seq, num_key_value_heads=kv,
                        ffn_embed_dim=ffn, model_type="llama", mlp_gated_linear_units=True)
    gpu = get_gpu_config_by_name("h100-sxm-80gb")
    dtype = get_dtype_config_by_name("w16a16e16")

    def estimate():
        a = LLMAnalysis(model, gpu, dtype, ParallelismConfig())
        return a.training(batch_size_per_gpu=batch, seq_len=seq,
                          gradient_accumulation_steps=1, flash_attn=True,
                          activation_recomputation=ActivationRecomputation(recompute))

    if once:
        s = estimate()
        print("llm-analysis peak: %d bytes" % s["(weight+op_state+act)_memory_per_gpu"])
        return
    n, t0 = 0, time.process_time()
    while True:
        estimate()
        n += 1
        dt = time.process_time() - t0
        if dt >= secs:
            break
    print("llm-analysis %s: %.1f us per estimate (%d in %.2f s CPU)" % (name, dt / n * 1e6, n, dt))


if __name__ == "__main__":
    main(sys.argv[1:])
