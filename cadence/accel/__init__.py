"""The optional fast path: compiled updates and unrolls, CUDA graphs and the compile cache.

Nothing below the trainer imports this package, and an eager run (``algorithm.compile=off``)
never loads it. It reaches the core through one seam:

- an algorithm's update: `compile_update` installs an `UpdateCompiler` as the algorithm's
  `cadence.algorithms.accelerator.UpdateAccelerator`, which runs what the algorithm passes
  through ``in_graph`` as compiled graphs and steps its optimizers in them;
- a collector's unrolls: `CompiledUnroll` is the `cadence.collect.unroll.UnrollStrategy` the
  trainer injects into the collector of a compiled run.

Private torch symbols the layer needs are in `cadence.accel.torch_private`.
"""

from cadence.accel.unroll_compiler import MAX_STEPS_PER_GRAPH, CompiledUnroll
from cadence.accel.update_compiler import UpdateCompiler, compile_update

__all__ = [
    "MAX_STEPS_PER_GRAPH",
    "CompiledUnroll",
    "UpdateCompiler",
    "compile_update",
]
