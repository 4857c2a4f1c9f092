"""The GPU suite: the template's training step measured on a lent GPU against insightface's arcface_torch, each
measurement in a process of its own (docs/speed.md, "GPU suite"). `bash benchmarks/gpu_suite/run.sh` is its
command (`python -m gpu_suite` with src/ and benchmarks/ on PYTHONPATH); `call.sh` is the prepared call of a
session's device time.

    cli.py         the command line and the parts in order
    rows.py        the rows and speed settings, each a job for its own process
    process.py     starts a job's process; job.py is what runs in it
    template.py    the template's step as train.py runs it; arcface.py arcface_torch's
    measure.py     timing, memory, FLOPs and host syncs, the same for both sides
    profiling.py   torch.profiler over a row's steps: kernels, busy share, host waits; host.py: the host's work
                   by source (backbone, class layer's chunk loop, head, loss, optimizer, Lightning's hooks)
    pipeline.py    the input pipeline against the fastest row
    printing.py    the header, table lines, profiles and goals
    train_path.py  the path users run (train.py as typed) against the suite's row

The flat benchmarks (bench_train.py, bench_data.py) it reuses are imported from benchmarks/.
"""
