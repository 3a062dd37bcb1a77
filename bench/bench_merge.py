"""Time every merge variant against a plain copy of the same bytes, side by side in one run.

    python bench/bench_merge.py --out $OUT/merge_bench.json

Per variant and size (default 8192x4096 and 131072x8192 bf16, half the tokens multimodal in
1024-token runs): the median of many CUDA-event-timed calls after a warm-up, the median of
``dst.copy_(src)`` for the multimodal rows alone (the floor any merge can reach), their ratio,
and the peak device memory the merge allocates beyond its inputs. ``--sweep`` also times the
Triton kernels alone under other tile shapes (``cases.merge.triton_config``) and program counts
(``cases.device_rows.device_rows_config``), to tune them.

Prints a table and writes JSON (``schema_version`` 1). Numbers are recorded, never asserted.

    python bench/bench_merge.py --split --out $OUT/merge-split.json

``--split`` measures the two costs a single CUDA-event figure mixes, apart, at 2048x2048 up to
131072x8192 (or ``--size``): **device time**, the merge's span on the stream while the GPU is
kept busy ahead of it (a ``torch.cuda._sleep`` kernel longer than the host work, so host work
overlaps as it does inside a model step and only a wait shows), and **host time**, CPU
microseconds per call. Each is the median of ``--reps`` calls, repeated for ``--rounds`` rounds;
the band is the spread of the round medians, so a change smaller than the band is noise. The
plain copy of the same bytes is measured the same way in the same rounds.

    python bench/bench_merge.py --host-phases --out $OUT/merge-host-phases.json

``--host-phases`` tests where the host time of the two Triton variants goes (the hypothesis in
``cases.merge.merge_triton_device_rows``'s docstring): host microseconds of each step alone
(checks, row finding or mask staging, the H2D copy, the kernel launch) and of the whole call,
the GPU kept busy as in ``--split``, median of ``--reps`` calls per round over ``--rounds``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES = ((8192, 4096), (131072, 8192))
SPLIT_SIZES = ((2048, 2048), (8192, 4096), (32768, 4096), (131072, 8192))
# Kernel-only timings (rows already on the device); {} is the default config for reference.
SWEEP = [{}] + [dict(block_h=b, rows_per_program=r, num_warps=w)
                for b, r, w in ((512, 8, 4), (1024, 2, 4), (1024, 8, 8), (2048, 2, 4),
                                (2048, 4, 8), (4096, 2, 8), (4096, 4, 8), (8192, 2, 8))]
# triton_device_rows, kernel only (mask already on the device): programs aimed at ({} = 4 per SM)
SWEEP_DEVICE_ROWS = [{}] + [{"programs": p} for p in (132, 264, 1056, 2112, 4224)]


def _size(text: str) -> tuple[int, int]:
    try:
        tokens, hidden = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size {text!r}: expected TOKENSxHIDDEN, e.g. 8192x4096")
    if tokens < 2 or hidden < 1:
        raise argparse.ArgumentTypeError(f"--size {text!r}: need at least 2 tokens and 1 hidden")
    return tokens, hidden


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--size", type=_size, action="append",
                    help="TOKENSxHIDDEN (repeatable; default 8192x4096 and 131072x8192)")
    ap.add_argument("--variant", action="append", help="only these variants (repeatable)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--sweep", action="store_true", help="also time other Triton tile shapes")
    ap.add_argument("--split", action="store_true",
                    help="device time and host time apart, with a noise band (see above)")
    ap.add_argument("--rounds", type=int, default=5, help="--split: rounds per measurement")
    ap.add_argument("--device-rows-same-stream", action="store_true",
                    help="triton_device_rows copies the mask on the merge's own stream instead "
                         "of a side stream (cases.device_rows.COPY_ON_SIDE_STREAM)")
    ap.add_argument("--host-phases", action="store_true",
                    help="host us of each step of the Triton variants (see above)")
    args = ap.parse_args(argv)

    import torch

    from cases import device_rows
    from cases.merge import VARIANTS, measure_merge, triton_available

    if args.device_rows_same_stream:  # before the first call: the choice is cached per stream
        device_rows.COPY_ON_SIDE_STREAM = False

    if not torch.cuda.is_available():
        print("bench_merge: CUDA is not available; nothing to measure", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        print(f"bench_merge: --dtype {args.dtype!r} is not a torch dtype", file=sys.stderr)
        return 2
    names = args.variant or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"bench_merge: unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    has_triton = triton_available()
    if args.host_phases:
        return _host_phases_main(args, dtype, has_triton)
    if args.split:
        return _split_main(args, names, dtype, has_triton)
    rows, skipped, sweep = [], [], []
    for tokens, hidden in args.size or SIZES:
        for name in names:
            if VARIANTS[name].needs_triton_on_cuda and not has_triton:
                skipped.append({"variant": name, "reason": "triton not installed"})
                continue
            rows.append(measure_merge(name, tokens, hidden, dtype=dtype, warmup=args.warmup,
                                      reps=args.reps))
            torch.cuda.empty_cache()
            _print_row(rows[-1])
        if args.sweep and has_triton and "triton_row_scatter" in names:
            for cfg in SWEEP:
                if cfg.get("block_h", 0) > 2 * hidden:
                    continue
                m = measure_merge("triton_row_scatter", tokens, hidden, dtype=dtype,
                                  warmup=args.warmup, reps=args.reps, triton_overrides=cfg)
                sweep.append(m)
                _print_row(m, tag=f" kernel only {m['triton_config']}")
            torch.cuda.empty_cache()
        if args.sweep and has_triton and "triton_device_rows" in names:
            for cfg in SWEEP_DEVICE_ROWS:
                m = measure_merge("triton_device_rows", tokens, hidden, dtype=dtype,
                                  warmup=args.warmup, reps=args.reps, triton_overrides=cfg)
                sweep.append(m)
                _print_row(m, tag=f" kernel only {m['triton_config']}")
            torch.cuda.empty_cache()
    doc = {
        "schema_version": 1, "kind": "syncguard-merge-bench",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": _environment(),
        "options": {"dtype": args.dtype, "warmup": args.warmup, "reps": args.reps,
                    "device_rows_copy": _copy_stream(),
                    "sizes": [f"{t}x{h}" for t, h in (args.size or SIZES)]},
        "results": rows, "skipped": skipped, "triton_sweep": sweep,
    }
    _print_table(rows)
    _write(doc, args.out)
    return 0


def _write(doc: dict, out: Path | None) -> None:
    """The JSON, atomically (a half-written file never replaces a good one)."""
    if not out:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, out)
    print(f"wrote {out}")


def _round_medians(fn, sleep_cycles: int, reps: int) -> tuple[float, float]:
    """(device ms, host us) medians of ``reps`` calls, each behind a sleep kernel."""
    import statistics

    import torch

    dev, host = [], []
    for _ in range(reps):
        torch.cuda._sleep(sleep_cycles)  # the GPU is busy: host work overlaps, only waits show
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        dev.append(start.elapsed_time(end))
        host.append((t1 - t0) * 1e6)
    return statistics.median(dev), statistics.median(host)


def _band(values: list[float], digits: int) -> dict:
    import statistics

    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def measure_split(name: str, tokens: int, hidden: int, *, dtype, warmup: int, reps: int,
                  rounds: int) -> dict:
    """One variant at one size: device ms and host us per call, and the same for a plain copy
    of the multimodal rows, interleaved round by round."""
    import torch

    from cases.merge import VARIANTS, peak_extra_bytes, representative_inputs

    inputs_embeds, mask, mm = representative_inputs(name, tokens, hidden, dtype=dtype)
    dst = torch.empty_like(mm)

    def merge():
        VARIANTS[name].fn(inputs_embeds, mask, mm)

    def copy():
        dst.copy_(mm)

    for _ in range(warmup):
        merge()
        copy()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    merge()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    # ~2 GHz: enough cycles to outlast the host work three times over, at least 2 ms
    sleep_cycles = int(max(2e-3, 3 * host_s) * 2e9)
    m_dev, m_host, c_dev, c_host, ratio = [], [], [], [], []
    for _ in range(rounds):
        d, h = _round_medians(merge, sleep_cycles, reps)
        cd, ch = _round_medians(copy, sleep_cycles, reps)
        m_dev.append(d), m_host.append(h), c_dev.append(cd), c_host.append(ch)
        ratio.append(d / cd if cd > 0 else float("nan"))
    peak_extra = peak_extra_bytes(merge)
    return {"variant": name, "tokens": tokens, "hidden": hidden, "mm_rows": mm.shape[0],
            "device_ms": _band(m_dev, 5), "host_us": _band(m_host, 1),
            "copy_device_ms": _band(c_dev, 5), "copy_host_us": _band(c_host, 1),
            "device_x_copy": _band(ratio, 3), "peak_extra_bytes": int(peak_extra),
            "sleep_cycles": sleep_cycles, "reps": reps, "rounds": rounds}


def _split_main(args, names, dtype, has_triton) -> int:
    import torch

    from cases.merge import VARIANTS

    rows, skipped = [], []
    for tokens, hidden in args.size or SPLIT_SIZES:
        for name in names:
            if VARIANTS[name].needs_triton_on_cuda and not has_triton:
                skipped.append({"variant": name, "reason": "triton not installed"})
                continue
            try:
                m = measure_split(name, tokens, hidden, dtype=dtype, warmup=args.warmup,
                                  reps=min(args.reps, 20), rounds=args.rounds)
            except Exception as e:  # noqa: BLE001 - one failing size must not lose the others
                skipped.append({"variant": name, "size": f"{tokens}x{hidden}",
                                "reason": f"{type(e).__name__}: {e}"[:300]})
                torch.cuda.empty_cache()
                continue
            rows.append(m)
            torch.cuda.empty_cache()
            d, h, x = m["device_ms"], m["host_us"], m["device_x_copy"]
            print(f"  {name:<20} {tokens}x{hidden}: device {d['median']:.4f} ms "
                  f"[{d['min']:.4f}-{d['max']:.4f}] = x{x['median']} copy "
                  f"[{x['min']}-{x['max']}], host {h['median']:.1f} us "
                  f"[{h['min']:.1f}-{h['max']:.1f}]", flush=True)
    doc = {"schema_version": 1, "kind": "syncguard-merge-bench-split",
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "environment": _environment(),
           "options": {"dtype": str(dtype).replace("torch.", ""), "warmup": args.warmup,
                       "reps": min(args.reps, 20), "rounds": args.rounds,
                       "device_rows_copy": _copy_stream(),
                       "sizes": [f"{t}x{h}" for t, h in (args.size or SPLIT_SIZES)]},
           "results": rows, "skipped": skipped}
    _write(doc, args.out)
    return 0


def host_phases(tokens: int, hidden: int, *, dtype, reps: int, rounds: int) -> list[dict]:
    """Host us per step of ``triton_row_scatter`` and ``triton_device_rows``, each step timed
    alone behind a sleep kernel (inputs of a step prepared once, outside its timing)."""
    import torch

    from cases import device_rows
    from cases.merge import (VARIANTS, _check_args, _count_slots, _host_rows,
                             flatten_embeddings, representative_inputs, row_scatter)

    x, mask, mm = representative_inputs("triton_row_scatter", tokens, hidden, dtype=dtype)
    dev = x.device
    rows = _host_rows("bench", mask, mm, pinned=True, index_dtype=torch.int32)
    rows_dev = rows.to(dev)
    kernel = device_rows.kernel()
    staged = device_rows.stage(mask, dev)
    device_rows.release(staged)  # its device bytes stay valid: the launch step reuses them

    def checks():
        _check_args("bench", x, mask, "cpu")
        flatten_embeddings(mm, x, "bench")

    steps = {
        "triton_row_scatter": {
            "checks + flatten": checks,
            "host rows (flatnonzero, pinned int32)":
                lambda: _host_rows("bench", mask, mm, pinned=True, index_dtype=torch.int32),
            "H2D rows": lambda: rows.to(dev, non_blocking=True),
            "launch (config, views, Triton)": lambda: row_scatter(mm, rows_dev, x),
            "whole call": lambda: VARIANTS["triton_row_scatter"].fn(x, mask, mm)},
        "triton_device_rows": {
            "checks + flatten": checks,
            "count slots": lambda: _count_slots(mask),
            "stage mask + H2D + release (ring, memcpy, copy, events)":
                lambda: device_rows.release(device_rows.stage(mask, dev)),
            "launch (config, views, Triton)":
                lambda: device_rows.launch(kernel, mm, staged.mask, x, staged.programs),
            "whole call": lambda: VARIANTS["triton_device_rows"].fn(x, mask, mm)},
    }
    out = []
    for variant, phases in steps.items():
        for fn in phases.values():  # warm: compile, first pinned blocks
            fn()
        torch.cuda.synchronize()
        for phase, fn in phases.items():
            medians = [_round_medians(fn, int(2e-3 * 2e9), reps)[1] for _ in range(rounds)]
            out.append({"variant": variant, "phase": phase, "tokens": tokens, "hidden": hidden,
                        "host_us": _band(medians, 1)})
            print(f"  {variant:<20} {tokens}x{hidden} {phase:<46} "
                  f"{out[-1]['host_us']['median']:8.1f} us", flush=True)
    return out


def _host_phases_main(args, dtype, has_triton) -> int:
    import torch

    if not has_triton:
        print("bench_merge: --host-phases needs triton", file=sys.stderr)
        return 2
    rows, skipped = [], []
    for tokens, hidden in args.size or SPLIT_SIZES:
        try:
            rows += host_phases(tokens, hidden, dtype=dtype, reps=min(args.reps, 50),
                                rounds=args.rounds)
        except Exception as e:  # noqa: BLE001 - one failing size must not lose the others
            skipped.append({"size": f"{tokens}x{hidden}",
                            "reason": f"{type(e).__name__}: {e}"[:300]})
        torch.cuda.empty_cache()
    doc = {"schema_version": 1, "kind": "syncguard-merge-host-phases",
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "environment": _environment(),
           "options": {"dtype": str(dtype).replace("torch.", ""), "reps": min(args.reps, 50),
                       "rounds": args.rounds, "device_rows_copy": _copy_stream(),
                       "sizes": [f"{t}x{h}" for t, h in (args.size or SPLIT_SIZES)]},
           "results": rows, "skipped": skipped}
    _write(doc, args.out)
    return 0


def _copy_stream() -> str:
    """Where triton_device_rows copied its mask in this run."""
    from cases import device_rows

    return "side stream" if device_rows.COPY_ON_SIDE_STREAM else "same stream"


def _environment() -> dict:
    """What every benchmark file records about where it ran, with the project commit (the
    same source as the session reports' provenance: SYNCGUARD_GIT_COMMIT on the GPU machine)."""
    import torch

    from syncguard.reporting.provenance import git_state

    return {"torch": torch.__version__, "cuda_runtime": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0), "python": platform.python_version(),
            "triton": _triton_version(), "project": git_state(ROOT)}


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def _print_row(m: dict, tag: str = "") -> None:
    print(f"  {m['variant']:<20} {m['tokens']}x{m['hidden']}: {m['median_ms']:.4f} ms "
          f"(copy {m['copy_median_ms']:.4f} ms, x{m['ratio_to_copy']}), "
          f"peak extra {m['peak_extra_bytes'] / 2**20:.1f} MiB{tag}", flush=True)


def _print_table(rows: list[dict]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return
    table = Table(title="merge variants vs a plain copy of the same bytes (median, CUDA events)")
    for col in ("variant", "size", "median ms", "copy ms", "ratio", "p10-p90 ms",
                "peak extra MiB"):
        table.add_column(col, justify="left" if col in ("variant", "size") else "right")
    for m in rows:
        table.add_row(m["variant"], f"{m['tokens']}x{m['hidden']}", f"{m['median_ms']:.4f}",
                      f"{m['copy_median_ms']:.4f}", f"{m['ratio_to_copy']:.2f}",
                      f"{m['p10_ms']:.4f}-{m['p90_ms']:.4f}",
                      f"{m['peak_extra_bytes'] / 2**20:.1f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    sys.exit(main())
