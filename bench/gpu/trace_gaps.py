"""Where a Phase 2 profile's GPU idle time went (issue 17, second pass): from the chrome trace
that `bench/gpu_rigel.py --phase2-profile-steps` writes (``phase2_trace.json.gz``), the GPU's idle
gaps over 0.3 ms attributed to what the host threads were doing at the gap's middle, and the host
synchronisations with the operations that caused them; then (third pass, two GPUs) every gap
whatever its length, each step's host time and GPU idle time, and the window between the backward's
end and ``Optimizer.step`` (where the gradients are all-reduced under torchrun): its host time,
the operations run in it and the GPU's idle time during it.

    python3 bench/gpu/trace_gaps.py phase2_trace.json.gz [steps]
"""

from __future__ import annotations

import collections
import gzip
import itertools
import json
import sys


def main() -> None:
    with gzip.open(sys.argv[1]) as handle:
        trace = json.load(handle)
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
        key=lambda e: e["ts"],
    )
    host = sorted(
        (e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime")),
        key=lambda e: e["ts"],
    )
    gaps, cursor = [], gpu[0]["ts"] + gpu[0]["dur"]
    for e in gpu[1:]:
        if e["ts"] > cursor + 300:
            gaps.append((cursor, e["ts"]))
        cursor = max(cursor, e["ts"] + e["dur"])
    busy = sum(e["dur"] for e in gpu) / 1000 / steps
    print(
        f"GPU kernels {busy:.1f} ms/step (sum of durations); {len(gaps)} gaps over 0.3 ms, "
        f"{sum(b - a for a, b in gaps) / 1000 / steps:.1f} ms/step"
    )
    where: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    for a, b in gaps:
        middle = (a + b) / 2
        active = [e["name"][:60] for e in host if e["ts"] <= middle <= e["ts"] + e["dur"]]
        key = " | ".join(active[-3:]) or "(no host op: Python between operations)"
        where[key] += (b - a) / 1000 / steps
        count[key] += 1
    print("\nGPU idle (ms/step), by what the host was doing:")
    for key, ms in sorted(where.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {ms:6.2f}  x{count[key]:<4d} {key}")
    cpu = [e for e in host if e.get("cat") in ("cpu_op", "user_annotation")]
    syncs = [e for e in host if e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize")]
    causes: collections.Counter[str] = collections.Counter()
    waited: dict[str, float] = collections.defaultdict(float)
    for s in syncs:
        parents = [
            e["name"][:50] for e in cpu
            if e["tid"] == s["tid"] and e["ts"] <= s["ts"] <= e["ts"] + e["dur"]
        ]  # fmt: skip
        key = " > ".join(parents[-3:]) or "(outside any operation)"
        causes[key] += 1
        waited[key] += s["dur"] / 1000 / steps
    print(f"\nHost synchronisations: {len(syncs)} in {steps} steps")
    for key, n in causes.most_common():
        print(f"  x{n:<4d} {waited[key]:5.2f} ms/step waited  {key}")
    steps_and_all_reduce(events, gpu, steps)


def steps_and_all_reduce(events: list[dict], gpu: list[dict], steps: int) -> None:
    def idle_ms(begin: float, end: float) -> float:
        idle, cursor = 0.0, begin
        for e in gpu:
            if e["ts"] + e["dur"] <= cursor:
                continue
            if e["ts"] >= end:
                break
            idle += max(0.0, min(e["ts"], end) - cursor)
            cursor = max(cursor, e["ts"] + e["dur"])
        return (idle + max(0.0, end - cursor)) / 1000

    every, cursor = [], gpu[0]["ts"] + gpu[0]["dur"]
    for e in gpu[1:]:
        if e["ts"] > cursor:
            every.append(e["ts"] - cursor)
        cursor = max(cursor, e["ts"] + e["dur"])
    print(f"\nAll gaps: {len(every) / steps:.0f} per step, {sum(every) / 1000 / steps:.1f} ms/step")
    for floor in (5, 20, 100, 300):
        longer = sum(g for g in every if g > floor) / 1000 / steps
        print(f"  over {floor:3d} us: {longer:5.1f} ms/step")
    nccl = [e for e in gpu if "nccl" in e["name"].lower()]
    if nccl:
        each = ", ".join(f"{e['dur']:.0f}" for e in nccl)
        print(f"NCCL kernels: {len(nccl)} in {steps} steps, us each: {each}")
    ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation")]
    zero = sorted(
        (e for e in ops if e["name"].startswith("Optimizer.zero_grad")), key=lambda e: e["ts"]
    )
    for a, b in itertools.pairwise(zero):
        print(
            f"step: host {(b['ts'] - a['ts']) / 1000:6.1f} ms, GPU idle "
            f"{idle_ms(a['ts'], b['ts']):5.1f} ms"
        )
    backward = [e for e in ops if e["name"].startswith("autograd::engine::evaluate_function")]
    for step in (e for e in ops if e["name"].startswith("Optimizer.step#")):
        ends = [e["ts"] + e["dur"] for e in backward if e["ts"] + e["dur"] <= step["ts"]]
        if not ends:
            continue
        begin = max(ends)
        inside = [e for e in ops if e["tid"] == step["tid"] and begin <= e["ts"] < step["ts"]]
        print(
            f"backward end -> Optimizer.step: host {(step['ts'] - begin) / 1000:5.2f} ms, "
            f"{len(inside)} operations ({sum(e['name'] == 'aten::_to_copy' for e in inside)} "
            f"casts), GPU idle {idle_ms(begin, step['ts'] + step['dur']):5.2f} ms through "
            f"Optimizer.step ({step['dur'] / 1000:.2f} ms)"
        )


if __name__ == "__main__":
    main()
