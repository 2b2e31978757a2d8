"""The order rules of a data transformer sequence (DESIGN §6), without torch.

`DataTransformerSequence` checks them on the transformers it is given, and
`DataTransformersConfig` on the names a config lists (through
`cadence.transforms.names.TRANSFORMER_ORDER_GROUPS`), so a config is checked without
importing a transformer.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum


class OrderGroup(IntEnum):
    """Where a transformer may stand in a sequence (DESIGN §6); lower groups come first."""

    UNTRANSFORMED = 0
    """`UntransformedTimeStep`: copies the raw step, so it must see it first."""
    REPLAY_READER = 1
    """Reads raw steps from the replay buffer (HER, `ReplayFrameStack`), so nothing before it
    may have changed the data it replaces."""
    OTHER = 2
    """Element-wise maps (normalizers, clipping, scaling, image scaling)."""


_GROUP_RULES = {
    OrderGroup.UNTRANSFORMED: "must be first, to copy the step before anything changes it",
    OrderGroup.REPLAY_READER: (
        "reads raw steps from the replay buffer, so it must come before transformers that "
        "change the data (only UntransformedTimeStep may precede it)"
    ),
    OrderGroup.OTHER: "changes the data element-wise",
}


class TransformerOrderError(ValueError):
    """Two transformers of a sequence break the order rules of DESIGN §6."""


def check_order(named_groups: Sequence[tuple[str, OrderGroup]]) -> None:
    """Checks that groups never decrease along a sequence (DESIGN §6).

    1. `UntransformedTimeStep`, if present, is first;
    2. transformers that read the replay buffer (HER, `ReplayFrameStack`) come next;
    3. everything else after them.

    Args:
        named_groups: ``(name, group)`` of each transformer, in order.

    Raises:
        TransformerOrderError: naming the first offending pair and how to fix it.
    """
    for later_index, (later, later_group) in enumerate(named_groups):
        for earlier_index, (earlier, earlier_group) in enumerate(named_groups[:later_index]):
            if earlier_group > later_group:
                raise TransformerOrderError(
                    f"data transformer order: {later} (position {later_index}) must come before "
                    f"{earlier} (position {earlier_index}): {later} "
                    f"{_GROUP_RULES[later_group]}. Move {later} ahead of {earlier}."
                )
            if earlier_group == later_group == OrderGroup.UNTRANSFORMED:
                raise TransformerOrderError(
                    f"data transformer order: {earlier} (position {earlier_index}) and {later} "
                    f"(position {later_index}) both claim the first place; keep one"
                )
