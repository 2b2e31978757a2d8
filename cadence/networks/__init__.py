"""Networks: MLP bodies, observation encoders, GRU/LSTM cores, action heads, value and Q networks.

Build an algorithm's networks from its spec and a `NetworkConfig`:

>>> import torch
>>> from cadence.data.specs import BoundedTensorSpec, TensorSpec
>>> from cadence.networks import MLP, NetworkConfig, make_action_head, make_encoder
>>> config = NetworkConfig(hidden_sizes=(32, 32))
>>> encoder = make_encoder(TensorSpec((4,)), config)
>>> body = MLP(encoder.output_dim, config.hidden_sizes, activation=config.activation)
>>> head = make_action_head(body.output_dim, BoundedTensorSpec((2,), minimum=-1.0), "tanh_normal")
>>> head(body(encoder(torch.zeros(5, 4)))).mode.shape
torch.Size([5, 2])
"""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "NetworkConfig": "config",
        "DeterministicActor": "deterministic_actor",
        "MultiCategorical": "distributions",
        "TanhNormal": "distributions",
        "DictEncoder": "encoders",
        "FlattenEncoder": "encoders",
        "ImageEncoder": "encoders",
        "OneHotEncoder": "encoders",
        "is_image": "encoders",
        "make_encoder": "encoders",
        "EnsembleLinear": "ensemble",
        "EnsembleMLP": "ensemble",
        "CategoricalHead": "heads",
        "MultiCategoricalHead": "heads",
        "NormalHead": "heads",
        "TanhNormalHead": "heads",
        "make_action_head": "heads",
        "MLP": "mlp",
        "RecurrentCore": "recurrent",
        "CriticEnsemble": "value",
        "QNetwork": "value",
        "ValueNetwork": "value",
    },
)

__all__ = [
    "MLP",
    "CategoricalHead",
    "MultiCategorical",
    "MultiCategoricalHead",
    "CriticEnsemble",
    "DeterministicActor",
    "DictEncoder",
    "EnsembleLinear",
    "EnsembleMLP",
    "FlattenEncoder",
    "ImageEncoder",
    "NetworkConfig",
    "NormalHead",
    "OneHotEncoder",
    "QNetwork",
    "RecurrentCore",
    "TanhNormal",
    "TanhNormalHead",
    "ValueNetwork",
    "is_image",
    "make_action_head",
    "make_encoder",
]
