"""Embedding on a CPU: eval's model against ONNX Runtime running the same exported model, and plain torch.

    python benchmarks/bench_embedding.py model-y1-test2/model-0000.params [--threads 1 2] [--batch 256] [--repeats 5]

Each variant embeds the same batch of faces as every evaluation does (the face and its flip, added), in one process,
the variants taking turns so that a busy machine slows them alike; images/s is the median over the repeats.

- eval: what eval.py, elasticface-embed and elasticface-compare run (`eval.embed.load_model_file` on the CPU: the
  layout rule's NHWC where it applies, BatchNorms folded, `eval.folded_batch_norm`; CPU_MICRO_BATCH faces at a time);
- onnxruntime: the project's own export of the same weights (`export.onnx.export_onnx`), `intra_op_num_threads` = the
  thread count, CPU_MICRO_BATCH faces at a time as eval (its pace is the same at 8 to 256);
- eval before: the layout rule, BatchNorms kept, the whole batch at once (eval.py before issue 80's item 4);
- plain torch: the backbone as loaded, NCHW, the whole batch at once.

Prints images/s per variant and thread count, eval's ratio to onnxruntime, and each variant's largest difference
from plain torch's embeddings. Another machine's kernels: `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2` (torch's
own and oneDNN's convolutions; onnxruntime's MLAS keeps the machine's).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

import torch

from elasticface.backbones.from_weights import backbone_from_weights
from elasticface.eval.embed import in_layout, load_model_file
from elasticface.export.onnx import export_onnx
from elasticface.metrics.verification import CPU_MICRO_BATCH, flip_fused_embeddings


def onnx_runner(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: torch.from_numpy(session.run(None, {name: x.numpy()})[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("weights", nargs="?", default=os.environ.get("ELASTICFACE_Y1_PARAMS"),
                        help="y1's model-0000.params (or any backbone file eval reads); default $ELASTICFACE_Y1_PARAMS")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=256, help="eval.py's batch_size")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not args.weights:
        parser.error("give y1's model-0000.params (or set ELASTICFACE_Y1_PARAMS)")
    logging.basicConfig(level=logging.WARNING)
    quiet = lambda *_: None  # noqa: E731
    plain, report = backbone_from_weights(args.weights, say=quiet)
    plain.eval()
    kept, _ = backbone_from_weights(args.weights, say=quiet)
    kept = in_layout(kept, report.layout, torch.device("cpu"))
    eval_model = load_model_file(args.weights, "cpu")
    onnx_path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    export_onnx(plain, onnx_path)
    faces = torch.rand(args.batch, 3, 112, 112) * 2 - 1
    print(f"{args.weights}: {report.layout}, batch {args.batch} with flip fusion ({2 * args.batch} forwards), "
          f"median of {args.repeats}; torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, oneDNN "
          f"{os.environ.get('ONEDNN_MAX_CPU_ISA', 'its own ISA')}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        # (model, faces at a time)
        variants = {"eval": (eval_model, CPU_MICRO_BATCH), "onnxruntime": (onnx_runner(onnx_path, threads),
                    CPU_MICRO_BATCH), "eval before": (kept, None), "plain torch": (plain, None)}
        with torch.inference_mode():
            reference = flip_fused_embeddings(plain, faces)
            diffs = {n: float((flip_fused_embeddings(m, faces, True, micro) - reference).abs().max())
                     for n, (m, micro) in variants.items()}
            rates: dict[str, list[float]] = {n: [] for n in variants}
            for _ in range(args.repeats):
                for name, (model, micro) in variants.items():
                    start = time.perf_counter()
                    flip_fused_embeddings(model, faces, True, micro)
                    rates[name].append(args.batch / (time.perf_counter() - start))
        median = {n: statistics.median(r) for n, r in rates.items()}
        print(f"\n{threads} thread(s)   images/s   spread        max |diff| from plain torch")
        for name, rate in median.items():
            print(f"  {name:<16} {rate:8.1f}   {min(rates[name]):6.1f}-{max(rates[name]):<6.1f}  {diffs[name]:.1e}")
        print(f"  eval / onnxruntime = {median['eval'] / median['onnxruntime']:.2f}; "
              f"eval / eval before = {median['eval'] / median['eval before']:.2f}")


if __name__ == "__main__":
    main()
