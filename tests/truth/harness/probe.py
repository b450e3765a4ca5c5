"""Measures one case: the peak of live tensor bytes during the second step of
a training, inference or generation run on CPU (what max_memory_allocated
reports on a GPU, without block rounding).

  /usr/bin/python3 probe.py CASES.json CASE_ID      # one result, JSON on stdout

How: torch 1.13's CPU allocator reports each allocation and free to the
profiler (profile_memory=True) together with its running total of the bytes
it has handed out since profiling began. The profiler starts before the model
is built, in a fresh process, so that total is the live tensor bytes. Phase
boundaries are found by allocating and freeing a marker tensor of an odd size
whose address is recorded. The events must form one unbroken chain
(total[i] = total[i-1] + size[i]); otherwise the case fails rather than
reporting a number whose order is unknown.
"""
import contextlib
import gc
import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref  # noqa: E402

MARK = 7777  # uint8 marker size: odd, so no real tensor of the runs has it
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Trace:
    def __init__(self):
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                           profile_memory=True)
        self.marks = []

    def __enter__(self):
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)

    def mark(self, name):
        t = torch.empty(MARK, dtype=torch.uint8)
        self.marks.append((name, t.data_ptr()))

    def events(self):
        """(time, ptr, size, running total, node) of every allocation, in order."""
        out, todo = [], list(self.prof.profiler.kineto_results.experimental_event_tree())
        while todo:
            e = todo.pop()
            if e.tag == torch._C._profiler._EventType.Allocation:
                f = e.extra_fields
                out.append((e.start_time_ns, f.ptr, f.alloc_size, f.total_allocated, e))
            todo.extend(e.children)
        out.sort(key=lambda r: r[0])
        for a, b in zip(out, out[1:]):
            if b[3] != a[3] + b[2]:
                raise RuntimeError("allocation events do not form one chain")
        return out


def op_label(node):
    """The innermost op that allocated, with the autograd node (or outermost op) around it."""
    names, p = [], node.parent
    while p is not None:
        names.append(p.name)
        p = p.parent
    if not names:
        return "(python)"
    for n in names:
        if n.startswith("autograd::engine::evaluate_function: "):
            return f"{names[0]} [{n.split(': ', 1)[1]}]"
    return names[0] if len(names) == 1 else f"{names[0]} [{names[-1]}]"


def split_phases(events, marks):
    """Live bytes at each marker and the peak after it (until the next), relative
    to the live bytes before the first marker. Marker events are left out."""
    idx, k = [], 0
    for i, (_, ptr, size, _, _) in enumerate(events):
        if k < len(marks) and size == MARK and ptr == marks[k][1]:
            idx.append(i)
            k += 1
    if k != len(marks):
        raise RuntimeError(f"found {k} of {len(marks)} markers")
    skip = set(idx) | {i + 1 for i in idx}
    for i in idx:  # a marker's free follows its allocation at once
        if events[i + 1][2] != -MARK:
            raise RuntimeError("marker free is not the next event")
    zero = events[idx[0]][3] - MARK
    level, peak = {}, {}
    for n, i in enumerate(idx):
        name = marks[n][0]
        level[name] = events[i][3] - MARK - zero
        stop = idx[n + 1] if n + 1 < len(idx) else len(events)
        peak[name] = max([level[name]] + [events[j][3] - zero for j in range(i + 2, stop) if j not in skip])
    return level, peak, idx, skip, zero


def live_at_peak(events, idx, skip, zero, start_name_pos, top=8):
    """The live set at the global peak after marker number start_name_pos, grouped by allocating op."""
    first = idx[start_name_pos]
    j_peak = max((j for j in range(first + 2, len(events)) if j not in skip), key=lambda j: events[j][3])
    live = {}
    for j in range(j_peak + 1):
        if j in skip:
            continue
        _, ptr, size, _, node = events[j]
        if size > 0:
            live[ptr] = (size, "live before step 2" if j < first else op_label(node))
        else:
            live.pop(ptr, None)
    groups = {}
    for size, lab in live.values():
        grp = groups.setdefault(lab, [0, 0])
        grp[0] += size
        grp[1] += 1
    rows = sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]
    after = max(n for n, i in enumerate(idx) if i < j_peak)
    return {
        "after_index": after,
        "allocation_by": op_label(events[j_peak][4]),
        "live_by_allocating_op": [{"allocated_by": k, "bytes": v[0], "tensors": v[1]} for k, v in rows],
        "sum_ok": sum(v[0] for v in groups.values()) == events[j_peak][3] - zero,
    }


# ---------------------------------------------------------------------- optimizers
class ForeachAdamTorch2(torch.optim.Optimizer):
    """What torch >= 2.1's _multi_tensor_adam(w) allocates (the CUDA default):
    one param-sized temporary list (eps is added in place), plus grads + wd * params
    for Adam with weight decay. Tensors grouped by dtype."""

    def __init__(self, params, lr, weight_decay, decoupled, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.decoupled = decoupled

    @torch.no_grad()
    def step(self):
        for grp in self.param_groups:
            b1, b2 = grp["betas"]
            lr, wd, eps = grp["lr"], grp["weight_decay"], grp["eps"]
            by_dtype = {}
            for p in grp["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.tensor(0.0)
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                by_dtype.setdefault(p.dtype, []).append(p)
            for ps in by_dtype.values():
                gs = [p.grad for p in ps]
                m1 = [self.state[p]["exp_avg"] for p in ps]
                m2 = [self.state[p]["exp_avg_sq"] for p in ps]
                steps = [self.state[p]["step"] for p in ps]
                torch._foreach_add_(steps, 1)
                if wd:
                    if self.decoupled:
                        torch._foreach_mul_(ps, 1 - lr * wd)
                    else:
                        gs = torch._foreach_add(gs, ps, alpha=wd)
                torch._foreach_mul_(m1, b1)
                torch._foreach_add_(m1, gs, alpha=1 - b1)
                torch._foreach_mul_(m2, b2)
                torch._foreach_addcmul_(m2, gs, gs, 1 - b2)
                del gs
                sizes = [-(lr / (1 - b1 ** s.item())) for s in steps]
                denom = torch._foreach_sqrt(m2)
                torch._foreach_div_(denom, [(1 - b2 ** s.item()) ** 0.5 for s in steps])
                torch._foreach_add_(denom, eps)
                torch._foreach_addcdiv_(ps, m1, denom, sizes)
                del denom


def optimizer(params, run):
    name, lr = run.get("optimizer", "adamw"), run.get("lr", 1e-4)
    fe = run.get("foreach", False)
    wd = run.get("weight_decay")
    wd = (0.01 if name == "adamw" else 0.0) if wd is None else wd
    if name in ("sgd", "sgd_momentum"):
        # torch 1.13 and 2.x foreach SGD allocate the same
        return torch.optim.SGD(params, lr=lr, momentum=0.9 if name == "sgd_momentum" else 0.0,
                               weight_decay=wd, foreach=bool(fe))
    if fe == "torch2":
        return ForeachAdamTorch2(params, lr, wd, decoupled=name == "adamw")
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    return cls(params, lr=lr, weight_decay=wd, foreach=fe)


# ---------------------------------------------------------------------- one case
def inputs(family, cfg, run, train, rng):
    """Labels exist only in training runs (inference and generation take none)."""
    b, out = run["batch"], {}
    if family in ("decoder", "vlm"):
        V = (cfg if family == "decoder" else cfg["text_config"])["vocab_size"]
        out["ids"] = torch.randint(0, V, (b, run["seq"]), generator=rng)
        if train:
            out["labels"] = out["ids"].clone()
    if family in ("vit", "vlm"):
        v = cfg if family == "vit" else cfg["vision_config"]
        s = v["image_size"]
        if v.get("model_type") == "qwen2_5_vl_vision":  # the processor's flat patch rows
            p, tp = v["patch_size"], v.get("temporal_patch_size", 2)
            out["pixels"] = torch.randn(b * (s // p) ** 2, 3 * tp * p * p, generator=rng)
        else:
            out["pixels"] = torch.randn(b, v.get("num_channels", 3), s, s, generator=rng)
    if family == "vit" and train:
        out["labels"] = torch.randint(0, cfg.get("num_labels", 1000), (b,), generator=rng)
    return out


def loss_of(model, family, x, variant, run=None, held=None):
    """Trainer.compute_loss: only the loss is kept, the logits are dropped (litgpt's fit
    loop keeps its logits list: ref.litgpt_loss). run.num_items_in_batch: the Trainer
    counts the labels first (labels.ne(-100).sum(), kept through the step) and the loss
    is summed and divided by that count."""
    run = run or {}
    if family == "decoder" and variant == "litgpt_chunked":
        return ref.litgpt_loss(model, x["ids"], x["labels"], int(run["loss_chunk"]), held)
    if family == "decoder" and run.get("num_items_in_batch"):
        held["num_items"] = x["labels"].ne(ref.IGNORE).sum()
        return model(ids=x["ids"], labels=x["labels"], variant=variant,
                     num_items=held["num_items"])[0]
    if family == "decoder":
        return model(ids=x["ids"], labels=x["labels"], variant=variant)[0]
    if family == "vit":
        return model(x["pixels"], x["labels"])[0]
    return model(x["ids"], x["pixels"], x["labels"], variant)[0]


def logits_of(model, family, x):
    if family == "decoder":
        return model(ids=x["ids"])[1]
    if family == "vit":
        return model(x["pixels"])[1]
    return model(x["ids"], x["pixels"])[1]


def greedy(model, family, x, n_new, mark, amp):
    """generate(): logits_to_keep=1, next-token logits copied to fp32, argmax, DynamicCache."""
    lm = model.language_model if family == "vlm" else model
    cache, ids = ref.Cache(), x["ids"]
    with amp():
        if family == "vlm" and not model.xattn:
            emb = lm.model.embed_tokens(ids)
            img = model.image_features(x["pixels"]).to(emb.dtype)
            emb = torch.cat([img, emb], dim=1)
            del img
            logits = lm(embeds=emb, cache=cache, keep=1)[1]
            del emb
        else:
            logits = lm(ids=ids, cache=cache, keep=1)[1]
    nxt = logits[:, -1, :].to(copy=True, dtype=torch.float32)
    del logits
    tok = torch.argmax(nxt, dim=-1)
    del nxt
    ids = torch.cat([ids, tok[:, None]], dim=-1)
    mark("prefill_end")
    for _ in range(n_new - 1):
        with amp():
            logits = lm(ids=tok[:, None], cache=cache, keep=1)[1]
        nxt = logits[:, -1, :].to(copy=True, dtype=torch.float32)
        del logits
        tok = torch.argmax(nxt, dim=-1)
        del nxt
        ids = torch.cat([ids, tok[:, None]], dim=-1)
    kv = cache.nbytes()
    mark("decode_end")
    del cache, ids, tok
    return kv


def load_model(host, load, dt, quant):
    """Loads `host` (the checkpoint: a model built before profiling, in load["from"]) onto
    the device one tensor at a time in module order, its tensors kept (they are host
    memory), and returns it holding the device tensors. load["cast"]:
      host    the cast happens before the copy (transformers: param.to(dtype), then to the
              device): each tensor arrives in the model dtype
      tensor  each tensor arrives in the checkpoint dtype and is cast on the device
      device  the whole model arrives in the checkpoint dtype, then model.to(dtype)
    With quant (QLoRA), every linear weight but the heads arrives in the model dtype and is
    quantized on arrival (bnb_ref.quantize_on_load); the rest as `host`."""
    import bnb_ref
    cast = load.get("cast", "host")
    keep, done = [], {}

    def arrive(t, to_dt):
        if cast == "host" or quant or not t.is_floating_point():
            d = torch.empty(t.shape, dtype=to_dt if t.is_floating_point() else t.dtype)
            d.copy_(t)
            return d
        d = t.detach().clone()  # the checkpoint dtype, on the device
        if cast == "tensor" and d.dtype != to_dt:
            d = d.to(to_dt)
        return d

    for mname, mod in list(host.named_modules()):
        leaf = mname.split(".")[-1]
        qlin = quant and isinstance(mod, torch.nn.Linear) and leaf not in bnb_ref.HEADS
        for pname, p in list(mod.named_parameters(recurse=False)):
            keep.append(p)
            if id(p) in done:
                setattr(mod, pname, done[id(p)])
                continue
            if qlin and pname == "weight":
                w = arrive(p, dt)
                q = bnb_ref.quantize_on_load(w, None, bool(quant.get("double_quant")))
                del w
                done[id(p)] = None
                parent, _, child = mname.rpartition(".")
                owner = host.get_submodule(parent) if parent else host
                setattr(owner, child, q)
                mod = q
                continue
            new = torch.nn.Parameter(arrive(p, dt), requires_grad=p.requires_grad)
            done[id(p)] = new
            setattr(mod, pname, new)
        for bname, b in list(mod.named_buffers(recurse=False)):
            if isinstance(mod, bnb_ref.Linear4bit):
                continue
            keep.append(b)
            mod._buffers[bname] = arrive(b, dt)
    if cast == "device" and not quant:
        host.to(dt)
    load_model.keep = keep  # host memory: never freed while profiling
    return host


def storages(ts):
    return {t.storage().data_ptr(): t.storage().nbytes() for t in ts if isinstance(t, torch.Tensor)}


def measure(case):
    torch.set_num_threads(1)
    family, cfg, run = case["family"], case["config"], case["run"]
    dt = DTYPES[run.get("dtype", "float32")]
    mixed = run.get("precision_mode", "pure") == "mixed"
    opt_name = run.get("optimizer", "adamw")
    train = opt_name not in (None, "none")
    n_gen = int(run.get("generate_tokens") or 0)
    variant = run.get("loss_variant", "ce")
    amp = (lambda: torch.autocast("cpu", dtype=dt)) if mixed else contextlib.nullcontext

    load = run.get("load")
    if load:  # the checkpoint on the host, before profiling (load_model)
        torch.manual_seed(int(run.get("seed", 0)))
        host = ref.build(family, cfg)
        src = DTYPES[load.get("from", "float32")]
        if src != torch.float32:
            host.to(src)
    with Trace() as tr:
        tr.mark("begin")
        if load:
            model = load_model(host, load, dt if not mixed else torch.float32, run.get("quant"))
            del host
            tr.mark("loaded")
        else:
            torch.manual_seed(int(run.get("seed", 0)))
            model = ref.build(family, cfg)
            if not mixed and dt != torch.float32:
                model.to(dt)
        lora, wrapped = run.get("lora"), []
        if run.get("quant"):  # QLoRA: bitsandbytes Linear4bit + peft (bnb_ref.py)
            import bnb_ref
            wrapped = bnb_ref.qlora(model, run["quant"], lora, quantized=bool(load))
        elif lora:
            wrapped = ref.add_lora(model, int(lora["r"]), float(lora.get("alpha") or 2 * lora["r"]),
                                   lora.get("targets") or ["q_proj", "k_proj", "v_proj", "o_proj"],
                                   dropout=float(lora.get("dropout") or 0.0),
                                   rslora=bool(lora.get("rslora")), dora=bool(lora.get("dora")))
            for name in lora.get("modules_to_save") or []:
                ref.modules_to_save(model, name)
            if family == "vit":  # the classifier trains in full
                model.classifier.requires_grad_(True)
        ref.freeze(model, run.get("frozen") or [])
        if run.get("grad_ckpt"):
            ref.enable_checkpointing(model)
        x = inputs(family, cfg, run, train, torch.Generator().manual_seed(1234))
        params = list({id(p): p for p in model.parameters()}.values())
        opt = None
        if train:
            model.train()
            opt = optimizer([p for p in params if p.requires_grad], run)
            held = {}  # what a trainer's loop keeps across the step (loss_of)

            def step(mark):
                with amp():
                    loss = loss_of(model, family, x, variant, run, held)
                mark("forward_end")
                loss.backward()
                del loss
                mark("backward_end")
                opt.step()
                mark("optimizer_end")
                opt.zero_grad(set_to_none=True)
                mark("zero_grad_end")
        elif n_gen:
            model.eval()

            def step(mark):
                with torch.no_grad():
                    kv = greedy(model, family, x, n_gen, mark, amp)
                mark("end")
                return kv
        else:
            model.eval()

            def step(mark):
                with torch.no_grad(), amp():
                    logits = logits_of(model, family, x)
                mark("forward_end")
                del logits
                mark("end")

        step(lambda name: None)  # step 1 creates the optimizer state
        gc.collect()
        parts = {"weights": storages(params), "grads": storages([p.grad for p in params]),
                 "buffers": storages(list(model.buffers())), "inputs": storages(list(x.values())),
                 "optimizer_state": storages([v for s in (opt.state.values() if opt else [])
                                              for v in s.values()])}
        union = {}
        for d in parts.values():
            union.update(d)
        enumerated = {k: sum(v.values()) for k, v in parts.items()}
        enumerated["total"] = sum(union.values())
        tr.mark("step2_begin")
        kv = step(tr.mark)
    ev = tr.events()
    level, peak, idx, skip, zero = split_phases(ev, tr.marks)
    names = [m[0] for m in tr.marks]
    s2 = names.index("step2_begin")
    at = live_at_peak(ev, idx, skip, zero, s2)
    base = level["step2_begin"]
    if train:
        phases = {"forward": "step2_begin", "backward": "forward_end", "optimizer": "backward_end",
                  "zero_grad": "optimizer_end"}
        ends = ["forward_end", "backward_end", "optimizer_end", "zero_grad_end"]
        last = "zero_grad_end"
    elif n_gen:
        phases = {"prefill": "step2_begin", "decode": "prefill_end", "cleanup": "decode_end"}
        ends, last = ["prefill_end", "decode_end", "end"], "end"
    else:
        phases, ends, last = {"forward": "step2_begin"}, ["forward_end", "end"], "end"
    pp = {ph: peak[m] for ph, m in phases.items()}
    total = max(pp.values())
    by_marker = {m: ph for ph, m in phases.items()}
    res = {
        "baseline_bytes": base,
        "peak_bytes": total,
        "peak_minus_baseline_bytes": total - base,
        "phase_peaks": pp,
        "phase_end": {e: level[e] for e in ends},
        "peak_at": {"phase": by_marker.get(names[at["after_index"]], names[at["after_index"]]),
                    "allocation_by": at["allocation_by"],
                    "live_by_allocating_op": at["live_by_allocating_op"]},
        "param_count": sum(p.numel() for p in params),
        "trainable_param_count": sum(p.numel() for p in params if p.requires_grad),
        "baseline_enumerated": enumerated,
        "baseline_unexplained_bytes": base - enumerated["total"],
        "end_minus_baseline_bytes": level[last] - base,
        "meta": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                 "mean_backward_compat": ref.OLD_MEAN, "events": len(ev),
                 "peak_live_sum_check": at["sum_ok"]},
    }
    if n_gen and not train:
        res["kv_cache_bytes_final"] = kv
    if load:  # from the first marker (nothing live) to the model on the device
        res["load_peak_bytes"] = peak["begin"]
        res["load_end_bytes"] = level["loaded"]
    derived = {}
    if family == "vlm":
        derived["num_image_tokens"] = model.image_tokens()
        derived["decoder_seq"] = run["seq"] + (0 if model.xattn else model.image_tokens())
    if family == "vit":
        derived["num_patches"] = (cfg["image_size"] // cfg["patch_size"]) ** 2
    if lora:
        derived["lora_wrapped_modules"] = len(wrapped)
    res["derived"] = derived
    return res


def main():
    path, cid = sys.argv[1], sys.argv[2]
    with open(path) as f:
        case = next(c for c in json.load(f) if c["id"] == cid)
    print(json.dumps(measure(case)))


if __name__ == "__main__":
    main()
