"""Where a capstone training step's device time goes (issue 40): the torch profiler's kernels of one training step
of lesson 6's models (d768, 2 layers, B32 x T1024, bf16, AdamW), per kernel name, summed over a few steps.

On the GPU machine::

    python scripts/profile06_capstone.py $OUT

Writes ``$OUT/profile06-<case>.txt`` (the kernel table) and prints each case's kernels per step, largest first.
Cases: the LSTM of one head and of 12 heads (fused backend) and the 12-head Transformer on SDPA (the peer).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

from gpulab.tasks import experiments, get_task

STEPS = 3


def build(case):
    task = get_task("parity")
    sizes = {"d_model": 768, "num_layers": 2}
    if case.startswith("lstm"):
        heads = int(case[4:])
        model, backend, note = experiments.lstm_or_fallback(task, 0, torch.bfloat16, num_heads=heads, **sizes)
        assert backend == "fused", note
    else:
        model = experiments.make_model(
            "Transformer", task, dtype=torch.bfloat16, attention="sdpa", num_heads=12, **sizes
        )
    x, y = task.sample(32, 1024, generator=torch.Generator().manual_seed(0), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main(out):
    for case in (os.environ.get("CASES") or "lstm1 lstm12 sdpa").split():
        step = build(case)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            dev = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            if e.device_type == torch.autograd.DeviceType.CUDA and dev > 0:
                rows.append((dev / STEPS / 1e3, e.count / STEPS, e.key))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        lines = [f"# {case}: kernels' device time per step {total:.3f} ms (sum over kernels, {STEPS} steps)"]
        lines += [f"{ms:8.3f} ms {n:6.1f}x  {name[:150]}" for ms, n, name in rows]
        text = "\n".join(lines)
        print(text[:6000], flush=True)
        with open(os.path.join(out, f"profile06-{case}.txt"), "w") as f:
            f.write(text + "\n\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
