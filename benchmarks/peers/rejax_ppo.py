"""rejax PPO on gymnax CartPole-v1: compile and run times of the jitted training loop.

Run in the rejax virtual environment (``bash benchmarks/rejax_env.sh``), by
``benchmarks/compiled_loop.py``; prints one JSON line:

    .venvs/rejax/bin/python benchmarks/peers/rejax_ppo.py --seed 0 [--evaluations 50]

``compile_s`` is ``jax.jit(...).lower(...).compile()`` (JAX's persistent compilation cache
is off, as by default), ``run_s`` the compiled loop, waited for. With ``--evaluations`` the
loop evaluates that many times (128 episodes each, rejax's default), and the output holds
the env step and return of each evaluation.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
from rejax import PPO


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--num-epochs", type=int, default=20)
    parser.add_argument("--num-minibatches", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--total-timesteps", type=int, default=102_400)
    parser.add_argument("--evaluations", type=int, default=0)
    args = parser.parse_args()
    every = args.total_timesteps // args.evaluations if args.evaluations else args.total_timesteps
    algorithm = PPO.create(
        env="CartPole-v1",
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        num_epochs=args.num_epochs,
        num_minibatches=args.num_minibatches,
        learning_rate=args.learning_rate,
        max_grad_norm=0.5,
        total_timesteps=args.total_timesteps,
        eval_freq=every,
        skip_initial_evaluation=True,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
    )
    key = jax.random.PRNGKey(args.seed)
    start = time.perf_counter()
    train = jax.jit(algorithm.train).lower(key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    _, evaluation = jax.block_until_ready(train(key))
    run_s = time.perf_counter() - start
    result = {
        "compile_s": compile_s,
        "run_s": run_s,
        "updates": args.total_timesteps
        // (args.num_envs * args.num_steps)
        * args.num_epochs
        * args.num_minibatches,
        "jax": jax.__version__,
    }
    if args.evaluations:
        _, returns = evaluation
        result["eval_steps"] = [every * (i + 1) for i in range(returns.shape[0])]
        result["eval_returns"] = [float(r) for r in jnp.mean(returns, axis=-1)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
