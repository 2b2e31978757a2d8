"""The default model-based networks are the Denoised MDP original's, layer for layer.

Each row of `ORIGINAL` is written from the original's code (the ``denoised_mdp`` package
of facebookresearch/denoised_mdp, paths relative to it): which latents a network reads
and its layers, for the sizes used here. The networks are built from the default configs
(and from the three DMC configs), and their real modules are read: a default that drifts
from the original fails here.

Sizes: the defaults (x = y = (120, 20), z empty; MLPs 400 wide), and for the z rows a z
group added with sizes all distinct (x 48/7, y 40/5, z 32/3), so an input read in the
wrong place shows as a wrong width.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.config import load_config
from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.mbrl.build import make_model_based
from cadence.mbrl.config import (
    DenoisedMDPConfig,
    DreamerConfig,
    SACLatentConfig,
    WorldModelConfig,
)

IMAGE = TensorSpec((3, 64, 64), dtype=torch.uint8)
ACTION = BoundedTensorSpec((6,), minimum=-1.0, maximum=1.0)
A = 6
E = 1024  # TransitionModelConfig.embedding_size


def layers(module: nn.Module) -> list[tuple]:
    """The leaf layers of ``module`` in order, as comparable tuples."""
    out: list[tuple] = []
    for m in module.modules():
        if isinstance(m, nn.Linear):
            out.append(("Linear", m.in_features, m.out_features))
        elif isinstance(m, nn.GRUCell):
            out.append(("GRUCell", m.input_size, m.hidden_size))
        elif isinstance(m, nn.ConvTranspose2d):
            out.append(("ConvT", m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0]))
        elif isinstance(m, nn.Conv2d):
            out.append(("Conv", m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0]))
        elif isinstance(m, (nn.ELU, nn.ReLU, nn.Flatten)):
            out.append((type(m).__name__,))
    return out


def mlp(sizes: list[int], act: str = "ELU") -> list[tuple]:
    """Linear layers ``sizes[i] -> sizes[i + 1]``, the activation after each but the last."""
    out: list[tuple] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
        out.append(("Linear", a, b))
        if i < len(sizes) - 2:
            out.append((act,))
    return out


def posterior_reads(net: nn.Module) -> dict[str, int]:
    """A posterior network's inputs and their widths, read from its split first layer."""
    reads = {f"new.{g}_belief": layer.in_features for g, layer in net.beliefs.items()}
    others = zip(net.other_names, net.others.values(), strict=True)
    reads.update({n: layer.in_features for n, layer in others})
    reads["embedding"] = net.embedding.in_features
    return reads


def _rssm_rows(xb, xs, yb, ys, zb=0, zs=0):
    """The original's RSSM for these sizes: {network: (reads, layers), ...}."""
    rows = {
        # networks/transition.py, TransitionModel.__init__ (x_state_action_pre_rnn, x_rnn,
        # x_belief_to_state_prior) and forward_generic (prev_x_state_action = cat(prev x
        # state, action)): all as wide as x's belief.
        "prior x": (
            {"x_state": xs, "action": A},
            mlp([xs + A, xb]) + [("ELU",), ("GRUCell", xb, xb)] + mlp([xb, xb, 2 * xs]),
        ),
        # same file, y_state_pre_rnn, y_rnn, y_belief_to_state_prior; forward_generic
        # feeds y_state_pre_rnn the previous y state alone.
        "prior y": (
            {"y_state": ys},
            mlp([ys, yb]) + [("ELU",), ("GRUCell", yb, yb)] + mlp([yb, yb, 2 * ys]),
        ),
        # same file, xy_belief_obs_to_state_posterior: one network over x and y, its input
        # cat(x_belief, y_belief, prev_z_belief, prev_z_state, embedding) in
        # forward_generic, hidden x_belief + y_belief wide.
        "posterior xy": (
            {
                "new.x_belief": xb,
                "new.y_belief": yb,
                **({"z_belief": zb, "z_state": zs} if zb else {}),
                "embedding": E,
            },
            mlp([xb + yb + zb + zs + E, xb + yb, 2 * xs + 2 * ys]),
        ),
    }
    if zb:
        # same file, z_state_action_x_pre_rnn (two layers), z_rnn, z_belief_to_state_prior;
        # forward_generic: cat(x_belief, x_state_for_z_belief (the posterior x state),
        # prev_z_state, action, y_belief, y_state_for_z_belief) with z_prior_uses_y (True
        # by default, networks/transition.py TransitionModel.__init__ and
        # agents/denoised_mdp.py TransitionModelConfig).
        rows["prior z"] = (
            {
                "new.x_belief": xb,
                "new.x_state": xs,
                "z_state": zs,
                "action": A,
                "new.y_belief": yb,
                "new.y_state": ys,
            },
            mlp([xb + xs + zs + A + yb + ys, zb, zb])
            + [("ELU",), ("GRUCell", zb, zb)]
            + mlp([zb, zb, 2 * zs]),
        )
        # same file, z_belief_obs_to_state_posterior; forward_generic: cat(x_belief,
        # x_posterior_state, y_belief, y_posterior_state, z_belief, embedding).
        rows["posterior z"] = (
            {
                "new.z_belief": zb,
                "new.x_belief": xb,
                "new.x_state": xs,
                "new.y_belief": yb,
                "new.y_state": ys,
                "embedding": E,
            },
            mlp([xb + yb + zb + E + xs + ys, zb, 2 * zs]),
        )
    return rows


def _check_rssm(rssm, expected: dict) -> None:
    for name, (reads, stack) in expected.items():
        kind, part = name.split()
        if kind == "prior":
            group = rssm.groups[part]
            actual_reads = {n: rssm._size(n) for n in rssm.prior_inputs(part)}
            assert group.input[0].in_features == sum(actual_reads.values()), name
            actual = layers(group.input) + layers(group.cell) + layers(group.prior)
        else:
            net = rssm.posteriors[part]
            actual_reads = posterior_reads(net)
            actual = [("Linear", sum(actual_reads.values()), net.embedding.out_features)]
            actual += layers(net.head)
        assert actual_reads == reads, name
        assert actual == stack, name


def _denoised_defaults(**world_model) -> DenoisedMDPConfig:
    return DenoisedMDPConfig(world_model=WorldModelConfig(**world_model))


def test_the_default_rssm_is_the_originals():
    rssm = make_model_based(_denoised_defaults(), IMAGE, ACTION).world_model.rssm
    _check_rssm(rssm, _rssm_rows(120, 20, 120, 20))
    assert sorted(rssm.posteriors) == ["xy"]  # one joint posterior, 240 wide


def test_the_default_z_group_reads_what_the_originals_does():
    sizes = dict(x_belief_size=48, x_state_size=7, y_belief_size=40, y_state_size=5)
    config = _denoised_defaults(**sizes, z_belief_size=32, z_state_size=3)
    rssm = make_model_based(config, IMAGE, ACTION).world_model.rssm
    _check_rssm(rssm, _rssm_rows(48, 7, 40, 5, 32, 3))
    assert sorted(rssm.posteriors) == ["xy", "z"]


def test_the_default_heads_encoder_decoder_and_policy_are_the_originals():
    algorithm = make_model_based(_denoised_defaults(), IMAGE, ACTION)
    model, policy = algorithm.world_model, algorithm.policy
    xf, full = 120 + 20, 120 + 20 + 120 + 20
    # networks/reward.py, RewardMeanNetwork: two hidden layers; agents/denoised_mdp.py,
    # RewardModelConfig: 400 wide, ELU. One network for x, one for y.
    for g in ("x", "y"):
        assert layers(model.reward_heads[g]) == mlp([xf, 400, 400, 1]), g
    # networks/encoder.py, EncoderModel.__init__ (64x64): four 4x4 stride-2 convs of
    # 32/64/128/256 filters, then Flatten and a linear layer to the embedding (1024);
    # agents/denoised_mdp.py, EncoderModelConfig: ReLU.
    convs = [("Conv", 3, 32, 4, 2), ("Conv", 32, 64, 4, 2), ("Conv", 64, 128, 4, 2)]
    convs.append(("Conv", 128, 256, 4, 2))
    encoder = [t for c in convs for t in (c, ("ReLU",))] + [("Flatten",), ("Linear", 1024, E)]
    assert layers(model.encoder) == encoder
    # networks/observation.py, ObservationModel.__init__ (64x64): fc1 to 1024 from the full
    # feature, then conv_part, which starts with the activation; ObservationModelConfig: ReLU.
    deconvs = [("ConvT", 1024, 128, 5, 2), ("ConvT", 128, 64, 5, 2), ("ConvT", 64, 32, 6, 2)]
    decoder = [("Linear", full, 1024)] + [t for d in deconvs for t in (("ReLU",), d)]
    decoder += [("ReLU",), ("ConvT", 32, 3, 6, 2)]
    assert layers(model.decoder) == decoder
    # networks/actor.py, ActorModel.__init__: four hidden layers; ActorModelConfig: 400, ELU.
    assert layers(policy.actor) == mlp([xf, 400, 400, 400, 400, 2 * A])
    # networks/value.py, ValueModel.__init__: three hidden layers; agents/learning/policy.py,
    # ValueModelConfig: 400, ELU.
    assert layers(policy.value) == mlp([xf, 400, 400, 400, 1])


def test_the_default_latent_sac_is_the_originals():
    algorithm = make_model_based(SACLatentConfig(), IMAGE, ACTION)
    sac, xf = algorithm.policy, 120 + 20
    # agents/learning/policy.py, SoftActorCritic.__init__: two Q networks of q_model_parser,
    # networks/value.py ValueModel with action_size (three hidden layers), QModelConfig 400
    # ELU; the actor is the world model's ActorModel (four hidden layers of 400).
    for critic in sac.critics:
        assert layers(critic) == mlp([xf + A, 400, 400, 400, 1])
    assert layers(sac.actor) == mlp([xf, 400, 400, 400, 400, 2 * A])
    # SoftActorCritic.__init__: log_ent_coef = zeros, alpha = 1.
    assert sac.log_alpha.item() == 0.0


def test_dreamer_defaults_are_the_originals_with_y_and_z_empty():
    rssm = make_model_based(DreamerConfig(), IMAGE, ACTION).world_model.rssm
    # networks/transition.py: with y and z empty the xy posterior is x's alone, x_belief
    # (200) wide, its input cat(x_belief, embedding).
    _check_rssm(rssm, _dreamer_rows())


def _dreamer_rows() -> dict:
    rows = _rssm_rows(200, 30, 0, 0)
    del rows["prior y"]
    reads, _ = rows.pop("posterior xy")
    reads = {k: v for k, v in reads.items() if v}
    return {**rows, "posterior x": (reads, mlp([200 + E, 200, 60]))}


@pytest.mark.parametrize(
    "name", ["dreamer_cheetah_pixels", "denoised_mdp_cheetah_noisy", "denoised_mdp_walker_noisy"]
)
def test_the_dmc_configs_build_the_originals_networks(name):
    config = load_config(name)
    algorithm = make_model_based(config.algorithm, IMAGE, ACTION)
    expected = _dreamer_rows() if name.startswith("dreamer") else _rssm_rows(120, 20, 120, 20)
    _check_rssm(algorithm.world_model.rssm, expected)
    assert len(layers(algorithm.policy.actor)) == len(mlp([1, 400, 400, 400, 400, 1]))
    assert algorithm.eval_mode == "original"
    # config.py, LearningConfig.TestConfig.num_episodes: 10.
    assert config.trainer.num_eval_episodes == 10
