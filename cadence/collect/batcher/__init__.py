"""The rlstructures `Batcher`: agents acting over environments in worker processes (or Ray
actors), writing their steps into shared memory. Its public names are `cadence.collect`'s."""
