"""Measures every case of a case file, each in a fresh process, and writes the
results file the accuracy test reads.

  nice /usr/bin/python3 measure.py ../cases_public.json ../results_public.json [--jobs 2]
      [--only ID,ID] [--missing] [--check]

--missing  measure only cases the results file lacks (keeps the others)
--check    re-measure the cases and compare with the results file; exit 1 on any
           difference in baseline, peak, phase peaks or phase ends (determinism)
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
COMPARED = ("baseline_bytes", "peak_bytes", "phase_peaks", "phase_end")


def measure_one(cases_path, cid):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t = time.time()
    p = subprocess.run([PY, os.path.join(HERE, "probe.py"), cases_path, cid], env=env,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}, time.time() - t
    return json.loads(p.stdout.strip().splitlines()[-1]), time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("results")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--missing", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    cases_path = os.path.abspath(a.cases)
    with open(cases_path) as f:
        cases = json.load(f)
    old = {}
    if os.path.exists(a.results):
        with open(a.results) as f:
            old = {r["id"]: r["measured"] for r in json.load(f)["results"]}
    todo = [c["id"] for c in cases]
    if a.only:
        want = set(a.only.split(","))
        todo = [i for i in todo if i in want]
    if a.missing:
        todo = [i for i in todo if i not in old or "error" in old[i]]
    t0, new, bad = time.time(), {}, 0

    def save():
        merged = dict(old, **new)
        doc = {"meta": {"device": "cpu", "torch": next(
                   (r["meta"]["torch"] for r in merged.values() if "meta" in r), None),
                        "method": "allocator running total via torch.profiler(profile_memory=True); "
                                  "tests/truth/README.md",
                        "cases_file": os.path.basename(cases_path), "n_cases": len(cases)},
               "results": [dict(c, measured=merged[c["id"]]) for c in cases if c["id"] in merged]}
        with open(a.results, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        return doc

    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futs = {ex.submit(measure_one, cases_path, i): i for i in todo}
        for fu in cf.as_completed(futs):
            cid = futs[fu]
            res, wall = fu.result()
            new[cid] = res
            if "error" in res:
                bad += 1
                note = "ERROR " + res["error"].strip().splitlines()[-1]
            elif a.check:
                same = all(res[k] == old.get(cid, {}).get(k) for k in COMPARED)
                bad += not same
                note = "same" if same else "DIFFERENT"
            else:
                note = f"peak {res['peak_bytes']:,}"
            print(f"[{time.time() - t0:6.0f}s] {cid:44s} {wall:5.1f}s {note}", flush=True)
            if not a.check:
                save()  # an interrupted run keeps what it measured
    if a.check:
        print(f"check: {len(todo) - bad} same, {bad} different or failed")
        sys.exit(1 if bad else 0)
    doc = save()
    print(f"wrote {a.results}: {len(doc['results'])} cases, {bad} errors, {time.time() - t0:.0f}s")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
