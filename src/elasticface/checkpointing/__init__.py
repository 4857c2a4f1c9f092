"""What makes a run survive: atomic checkpoint writes, periodic and last checkpoints, resume, preemption.

`atomic_save` (a kill never leaves a broken file), `run_checkpoint` (last.ckpt and the newest step files),
`loader_resume` (a mid-epoch resume continues at the saved batch), `preemption` (the scheduler's signal
becomes a checkpoint at a step boundary and a requeue), `resume` (`resume=auto`: skip, continue or start),
`images_seen` (a resume at another global batch keeps the schedule in images seen, or says that it jumps).
"""
