"""`Trainer`: the loop ``while not done: train_iter()`` with logging, evaluation,
checkpoints, pre-emption and resume (DESIGN §8)."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.scheme import IterationResult, NoProgress, TrainingScheme
from cadence.collect.unroll import Collector
from cadence.envs.env_state import UnsavableEnvStateError
from cadence.envs.environment import Environment
from cadence.envs.errors import EnvStateMismatchError
from cadence.replay.chunk_writer import ChunkWriteError
from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.config import TrainerConfig
from cadence.trainer.distributed import Ranks, load_checkpoint_of_ranks, save_checkpoint_of_ranks
from cadence.trainer.errors import NonFiniteUpdateError, RunStorageError
from cadence.trainer.evaluation import evaluate_episodes
from cadence.trainer.metrics import MetricsWriter, NullMetricsWriter
from cadence.trainer.preemption import PreemptionGuard
from cadence.trainer.progress import ProgressBar
from cadence.trainer.rng import rng_state, set_rng_state

logger = logging.getLogger(__name__)

Outcome = Literal["complete", "preempted", "stopped_at_eval_return", "paused"]

# Called after each evaluation with the env steps and the eval metrics; True pauses the run.
EvaluationHook = Callable[[int, dict[str, float]], bool]

_SCHEME_DATA = "data"  # the checkpoint's directory of the training scheme's files


class Trainer:
    """Runs training iterations until the env-step budget is spent.

    Args:
        config: budget, intervals and checkpoint policy.
        algorithm: the algorithm being trained.
        collector: runs the algorithm in the training environments.
        scheme: provides ``train_iter()``.
        make_eval_env: builds the evaluation environments for a given seed.
        run_dir: the run directory (DESIGN §8).
        eval_seed: the seed of the first evaluation (each later one adds its iteration).
        on_evaluation: called after each evaluation (its metrics row written) with the env
            steps and the ``eval/*`` metrics; returning True pauses the run there, as a
            pre-emption does: it checkpoints, returns ``"paused"`` and writes no
            ``COMPLETE``, so the next start resumes (``cadence sweep`` steps seeds in
            lockstep with it). An evaluation that ends the budget completes the run.
        ranks: this process's place in a group of learner processes (docs/ddp.md);
            None for one process. Every rank runs this loop on its own environments: the
            counters, metrics, evaluations and pre-emption are those of the whole group,
            and only rank 0 writes the run directory.
    """

    def __init__(
        self,
        config: TrainerConfig,
        algorithm: Algorithm,
        collector: Collector,
        scheme: TrainingScheme,
        make_eval_env: Callable[[int], Environment],
        run_dir: Path,
        eval_seed: int,
        on_evaluation: EvaluationHook | None = None,
        ranks: Ranks | None = None,
    ):
        self.config = config
        self.ranks = ranks if ranks is not None else Ranks.single()
        self.on_evaluation = on_evaluation
        self.algorithm = algorithm
        self.collector = collector
        self.scheme = scheme
        self.make_eval_env = make_eval_env
        self.run_dir = Path(run_dir)
        self.eval_seed = eval_seed
        self.checkpoints = CheckpointManager(self.run_dir / "checkpoints", config.keep_checkpoints)
        algorithm.skip_nonfinite_updates = config.skip_nonfinite_updates
        self.counters = {
            "iteration": 0,
            "env_steps": 0,
            "num_episodes": 0,
            "wall_time": 0.0,
            "train_time": 0.0,
        }
        self._pending: dict[str, list[torch.Tensor]] = {}
        self.last_eval: dict[str, float] = {}
        self._videos: dict[str, torch.Tensor] = {}
        self._eval_iteration = -1
        self._latest_rollout_return: float | None = None
        self._warned_env_state = False
        self._saved_iteration = -1
        self._wall_time_at_start = 0.0
        self._session_start = time.perf_counter()
        self._bar = ProgressBar(config.num_env_steps, "off")  # the shown one while run() runs

    # ----------------------------------------------------------------- the loop
    def run(self) -> Outcome:
        """Trains (resuming from the latest checkpoint if any) and returns how it ended."""
        part = self.ranks.part
        self.scheme.persist(self.run_dir / (f"replay_{part}" if part else "replay"))
        try:
            outcome = self._run()
        except BaseException:
            with contextlib.suppress(Exception):  # the error under way is the one to report
                self.scheme.close()
            raise
        try:
            self.scheme.close()
        except ChunkWriteError as error:
            raise self._storage_error("the replay buffer's files", error) from error
        return outcome

    def _run(self) -> Outcome:
        resumed = self.restore()
        self._wall_time_at_start = self.counters["wall_time"]
        self._session_start = time.perf_counter()
        writer = (
            MetricsWriter(self.run_dir, self.counters["iteration"], self.counters["env_steps"])
            if self.ranks.is_writer
            else NullMetricsWriter()
        )
        outcome: Outcome = "complete"
        try:
            with (
                PreemptionGuard() as preemption,
                ProgressBar(
                    self.config.num_env_steps,
                    self.config.progress_bar if self.ranks.is_writer else "off",
                    interval_s=self.config.progress_interval_s,
                ) as bar,
            ):
                self._bar = self.scheme.progress = bar
                if resumed:
                    bar.update(self.counters["env_steps"], iteration=self.counters["iteration"])
                compiler = self.algorithm.accelerator
                if compiler is not None:
                    compiler.on_compile = lambda started: bar.set_status(
                        "compiling" if started else None
                    )
                while self.counters["env_steps"] < self.config.num_env_steps:
                    outcome = self._iteration(writer, bar)
                    budget_left = self.counters["env_steps"] < self.config.num_env_steps
                    # A signal to any rank stops every rank at this same iteration.
                    requested = self.ranks.any(preemption.requested)
                    if outcome in ("complete", "paused") and requested and budget_left:
                        outcome = "preempted"
                    if outcome != "complete":
                        break
                if outcome != "preempted" and not self.last_eval_is_current():
                    self._evaluate(writer)
                # Inside the guard: a second signal during the final save cannot cut it short.
                self.save()
        finally:
            self.scheme.progress = NoProgress()
            self._bar = ProgressBar(self.config.num_env_steps, "off")
            writer.close()
        if outcome not in ("preempted", "paused") and self.ranks.is_writer:
            (self.run_dir / "COMPLETE").write_text(f"{outcome}\n")
        return outcome

    def _iteration(self, writer: MetricsWriter | NullMetricsWriter, bar: ProgressBar) -> Outcome:
        start = time.perf_counter()
        horizon = self.config.schedule_horizon or self.config.num_env_steps  # docs/resume.md
        self.algorithm.set_progress(self.counters["env_steps"] / horizon)
        try:
            result = self.scheme.train_iter()
        except ChunkWriteError as error:  # e.g. a full disk
            raise self._storage_error("the replay buffer's files", error) from error
        bar.begin(None)  # between the scheme's reports and evaluating
        result = self.ranks.combine(result)
        losses, episodes = result.metrics, result.episodes
        elapsed = time.perf_counter() - start
        counters = self.counters
        self._check_finite(result)
        counters["iteration"] += 1
        counters["env_steps"] += self._env_steps_per_unroll
        counters["num_episodes"] += int(episodes["return"].numel())
        counters["train_time"] += elapsed
        self._accumulate(losses, episodes, elapsed)
        iteration = counters["iteration"]
        # The last iteration is evaluated here too, so that its evaluation shares its row of
        # metrics.jsonl (run() evaluating after the loop wrote a second row for it).
        last = counters["env_steps"] >= self.config.num_env_steps
        evaluated = (self._every(self.config.eval_interval) or last) and self._evaluate(writer=None)
        if self._every(self.config.summary_interval) or evaluated:
            self._log(writer)
        bar.update(
            counters["env_steps"],
            self._steps_per_s(elapsed),
            self._latest_return(),
            self.last_eval.get("eval/episode_return"),
            iteration=iteration,
        )
        if self._every(self.config.checkpoint_interval):
            self.save()
        target = self.config.stop_at_eval_return
        if evaluated and target is not None and self.last_eval["eval/episode_return"] >= target:
            logger.info(
                "eval return %.1f reached %.1f at iteration %d",
                self.last_eval["eval/episode_return"],
                target,
                iteration,
            )
            return "stopped_at_eval_return"
        hook = self.on_evaluation
        if evaluated and not last and hook and hook(counters["env_steps"], self.last_eval):
            return "paused"
        return "complete"

    def _check_finite(self, result: IterationResult) -> None:
        """Stops training at the first iteration whose updates met a non-finite value
        (one host sync per iteration: the flag was accumulated on the device), or, with
        ``skip_nonfinite_updates``, warns of the updates that were skipped."""
        skipped = int(result.metrics.get("train/skipped_updates", 0))
        if skipped:
            logger.warning(
                "iteration %d: skipped %d update(s) with a non-finite loss or gradient "
                "(trainer.skip_nonfinite_updates)",
                self.counters["iteration"] + 1,
                skipped,
            )
        if not bool(result.nonfinite):
            return
        bad = [key for key, value in result.metrics.items() if not math.isfinite(value)]
        raise NonFiniteUpdateError(
            f"iteration {self.counters['iteration'] + 1}: a non-finite loss or gradient "
            f"({', '.join(bad) or 'in one of the updates'}); training stopped and nothing of "
            f"this iteration was checkpointed{self._latest_checkpoint_note()}. Lower the "
            "learning rate, clip gradients (max_grad_norm) or check the rewards "
            "and observations for NaN or huge values."
        )

    def _latest_checkpoint_note(self) -> str:
        saved = self.checkpoints.latest()
        return f" (the latest checkpoint is {saved})" if saved is not None else ""

    def _storage_error(self, what: str, error: OSError) -> RunStorageError:
        saved = self.checkpoints.latest()
        return RunStorageError(
            f"{what} could not be written ({error}); training stopped. "
            + (
                f"The previous checkpoint {saved} is intact: "
                if saved is not None
                else "No checkpoint was published yet: "
            )
            + "free some space (or fix the run directory) and run the same command to resume."
        )

    def _check_parameters_finite(self) -> None:
        """No checkpoint holding a NaN or infinite parameter is published (an update with
        a finite loss can still overflow a weight)."""
        parameters = dict(self.algorithm.named_parameters())
        if not parameters:
            return
        norms = torch.stack([torch.linalg.vector_norm(p) for p in parameters.values()])
        if bool(torch.isfinite(norms).all()):
            return
        bad = [
            name
            for name, norm in zip(parameters, norms.tolist(), strict=True)
            if not math.isfinite(norm)
        ]
        raise NonFiniteUpdateError(
            f"iteration {self.counters['iteration']}: parameter(s) {', '.join(bad[:5])} are NaN "
            "or infinite; training stopped and this iteration was not checkpointed"
            f"{self._latest_checkpoint_note()}. Lower the learning rate or clip gradients (max_grad_norm)."
        )

    # ------------------------------------------------------------ log points
    def _accumulate(
        self, losses: dict[str, float], episodes: dict[str, torch.Tensor], elapsed: float
    ) -> None:
        pending = self._pending
        for key, value in losses.items():
            pending.setdefault(key, []).append(torch.tensor([value], dtype=torch.float64))
        for key, values in episodes.items():
            pending.setdefault(f"episodes/{key}", []).append(values.double().cpu())
        pending.setdefault("perf/time", []).append(torch.tensor([elapsed], dtype=torch.float64))

    def _log(self, writer: MetricsWriter | NullMetricsWriter) -> None:
        metrics: dict[str, float] = {}
        pending, self._pending = self._pending, {}
        time_spent = float(torch.cat(pending.pop("perf/time", [torch.zeros(1)])).sum())
        steps = len(pending.get("train/num_updates", [])) * self._env_steps_per_unroll
        if time_spent > 0:
            metrics["perf/env_steps_per_s"] = steps / time_spent
        for key, values in pending.items():
            values = torch.cat(values)
            if key == "episodes/length":  # in env steps, as budgets and evaluation count
                values = values * self.collector.action_repeat
            if key.startswith("episodes/"):
                metrics.update(_episode_metrics("rollout", key.removeprefix("episodes/"), values))
            elif values.numel():
                metrics[key] = float(values.mean())
        metrics["rollout/num_episodes"] = float(self.counters["num_episodes"])
        compiler = self.algorithm.accelerator
        if compiler is not None:  # this session's seconds spent compiling (in train_time)
            metrics["perf/compile_s"] = compiler.compile_seconds
        metrics.update(self.last_eval if self._eval_iteration == self.counters["iteration"] else {})
        self._latest_rollout_return = metrics.get(
            "rollout/episode_return", self._latest_rollout_return
        )
        writer.write(self._counter_record(), metrics)
        if self._videos:
            writer.write_videos(self.counters["env_steps"], self._videos)
            self._videos = {}

    def _counter_record(self) -> dict[str, float]:
        c = self.counters
        c["wall_time"] = self._wall_time_at_start + time.perf_counter() - self._session_start
        return {
            "iteration": c["iteration"],
            "env_steps": c["env_steps"],
            "wall_time": c["wall_time"],
            "train_time": c["train_time"],
        }

    # ------------------------------------------------------------ evaluation
    def _evaluate(self, writer: MetricsWriter | NullMetricsWriter | None) -> bool:
        self._bar.begin("evaluating")
        env = self.make_eval_env(self.eval_seed + self.counters["iteration"])
        try:
            with torch.random.fork_rng(devices=[]):
                episodes = evaluate_episodes(
                    self.algorithm,
                    env,
                    self.collector.learner_device,
                    self.collector.transformer,
                    self.config.eval_max_episode_steps,
                    self.collector.action_repeat,  # lengths in env steps, as budgets count
                )
        finally:
            env.close()
        episodes = self.ranks.gather_episodes(episodes)
        self.last_eval = {}
        for key, values in episodes.items():
            self.last_eval.update(_episode_metrics("eval", key, values.double().cpu()))
        self._eval_iteration = self.counters["iteration"]
        self._videos = self.algorithm.summaries() if self.ranks.is_writer else {}
        logger.info(
            "iteration %d: eval return %.2f",
            self.counters["iteration"],
            self.last_eval["eval/episode_return"],
        )
        if writer is not None:
            self._log(writer)
        self._bar.begin(None)
        return True

    def last_eval_is_current(self) -> bool:
        return self._eval_iteration == self.counters["iteration"]

    # ----------------------------------------------------------- checkpoints
    def save(self) -> None:
        """Checkpoints everything needed to continue exactly from here (once per iteration:
        the checkpoint of an iteration already published is not written again)."""
        if self._saved_iteration == self.counters["iteration"]:
            return
        self._bar.begin("checkpointing")
        self._check_parameters_finite()
        self._counter_record()  # brings wall_time up to date
        state = self.state_dict(scheme=False)

        def write_files(staging: Path) -> dict[str, str]:
            # The scheme's bulk data (the replay buffer) goes beside state.pt as files.
            state["scheme"], files = self.scheme.write_checkpoint(staging / _SCHEME_DATA)
            return {f"{_SCHEME_DATA}/{name}": digest for name, digest in files.items()}

        evaluated = self.last_eval_is_current() and "eval/episode_return" in self.last_eval
        eval_return = self.last_eval["eval/episode_return"] if evaluated else None
        try:
            if self.ranks.world_size == 1:
                self.checkpoints.save(self.counters["iteration"], state, write_files, eval_return)
            else:
                save_checkpoint_of_ranks(
                    self.checkpoints,
                    self.ranks,
                    self.counters["iteration"],
                    state,
                    write_files,
                    eval_return,
                )
        except OSError as error:
            raise self._storage_error(
                f"the checkpoint of iteration {self.counters['iteration']}", error
            ) from error
        self._saved_iteration = self.counters["iteration"]
        self._bar.begin(None)

    def state_dict(self, scheme: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly from here (``scheme=False``: all but the
        training scheme's state, which a checkpoint takes as files)."""
        return {
            "algorithm": self.algorithm.state_dict(),
            "collector": self.collector.state_dict(),
            "scheme": self.scheme.state_dict() if scheme else {},
            "data_transformers": _transformer_state(self.collector),
            "env": self._env_state(),
            "counters": dict(self.counters),
            "pending_metrics": {k: torch.cat(v) for k, v in self._pending.items()},
            # So that a run resumed from its last iteration does not evaluate (and log) it again.
            "last_eval": {"iteration": self._eval_iteration, "metrics": dict(self.last_eval)},
            "rng": rng_state(),
        }

    def restore(self) -> bool:
        """Loads the latest checkpoint if there is one; returns whether it did."""
        if self.ranks.world_size == 1:
            if not self.checkpoints.has_checkpoints():
                return False
            path, state = self.checkpoints.load_verified(map_location=self.collector.learner_device)
            files = self.checkpoints.manifest_files(path)
            part = path
        else:
            loaded = load_checkpoint_of_ranks(
                self.checkpoints, self.ranks, self.collector.learner_device
            )
            if loaded is None:
                return False
            path, state, files = loaded
            part = path / self.ranks.part
        self._saved_iteration = int(state["counters"]["iteration"])
        self.algorithm.load_state_dict(state["algorithm"])
        prefix = f"{_SCHEME_DATA}/"
        self.scheme.read_checkpoint(
            state["scheme"],
            part / _SCHEME_DATA,
            {k.removeprefix(prefix): v for k, v in files.items() if k.startswith(prefix)},
        )
        if self.collector.transformer is not None:
            self.collector.transformer.load_state_dict(state["data_transformers"])
        self.counters.update(state["counters"])
        self._pending = {k: [v.cpu()] for k, v in state["pending_metrics"].items()}
        last_eval = state.get("last_eval", {"iteration": -1, "metrics": {}})  # older checkpoints
        self._eval_iteration, self.last_eval = last_eval["iteration"], dict(last_eval["metrics"])
        if self._restore_env(state["env"]):
            self.collector.load_state_dict(state["collector"])
        set_rng_state(state["rng"])
        logger.info("resumed from %s (iteration %d)", path, self.counters["iteration"])
        return True

    def _restore_env(self, env_state: Any) -> bool:
        """Restores the checkpoint's environment state; where there is none, or it is of
        another kind of back end (``prefer_tensor`` resolved otherwise after a change of
        env.wrappers), warns and returns False: the collector then starts from env.reset()
        with fresh episode sums (those of the checkpoint's episodes would otherwise be
        carried into the new ones)."""
        if env_state is None:
            reason = (
                "the checkpoint holds no environment state (the environment could not be pickled)"
            )
        else:
            try:
                self.collector.env.set_state(env_state)
                return True
            except EnvStateMismatchError as error:
                reason = (
                    f"the checkpoint's environment state does not fit these environments: {error}"
                )
        # The stored episodes in progress end where they were cut (LAST, discount 1), so
        # that no replayed transition runs from their last step into a new episode.
        self.scheme.cut_episodes()
        logger.warning(
            "%s; the environments are reset and start new episodes (those in progress end "
            "as truncated)",
            reason,
        )
        return False

    def _env_state(self) -> Any:
        try:
            return self.collector.env.get_state()
        except Exception as error:  # noqa: BLE001 - any env may fail to pickle
            if not self._warned_env_state:
                if isinstance(error, UnsavableEnvStateError):  # expected; says it all
                    logger.warning("%s", error)
                else:
                    logger.warning(
                        "environment state cannot be saved (%s); a run resumed from a "
                        "checkpoint cuts its episodes and starts new ones",
                        error,
                    )
                self._warned_env_state = True
            return None

    # --------------------------------------------------------------- helpers
    def _every(self, interval: int) -> bool:
        return interval > 0 and self.counters["iteration"] % interval == 0

    @property
    def _env_steps_per_unroll(self) -> int:
        """Env steps of one iteration of the whole group (every rank unrolls)."""
        return self.collector.num_env_steps_per_unroll * self.ranks.world_size

    def _steps_per_s(self, elapsed: float) -> float | None:
        return self._env_steps_per_unroll / elapsed if elapsed > 0 else None

    def _latest_return(self) -> float | None:
        return self._latest_rollout_return


def _transformer_state(collector: Collector) -> dict[str, Any]:
    """The data transformers' statistics (normalizers), empty without transformers."""
    return {} if collector.transformer is None else collector.transformer.state_dict()


def _episode_metrics(prefix: str, key: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    name = {"return": "episode_return", "length": "episode_length", "cut": "episodes_cut"}.get(key)
    if name is not None:
        return {f"{prefix}/{name}": float(values.mean())}
    if key == "info/is_success":
        return {f"{prefix}/success_rate": float(values.mean())}
    return {f"{prefix}/{key.replace('info/', 'env_info/')}": float(values.mean())}
