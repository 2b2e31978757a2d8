"""`SumTree`: an array-based binary tree of sums, batched with tensor ops.

Proportional prioritized replay (Schaul et al., 2016,
https://arxiv.org/abs/1511.05952, Appendix B.2.1) samples slot ``i`` with
probability ``p_i / sum_j p_j``. The tree makes both a priority update and a
sample O(log n); here every operation takes a whole batch, so a level of the
tree is one tensor op and nothing loops over samples.

Layout: node 1 is the root, node ``k`` has children ``2k`` and ``2k + 1``, and
leaf ``i`` is node ``num_leaves + i`` with ``num_leaves`` a power of two. Sums
are float64 and recomputed from the children on every update, so rounding
errors never accumulate.
"""

from __future__ import annotations

import torch


class SumTree:
    """Non-negative values of ``size`` slots with batched update and prefix-sum search.

    Args:
        size: number of slots.
        device: where the tree lives.

    >>> tree = SumTree(4)
    >>> tree.set(torch.tensor([0, 2]), torch.tensor([1.0, 3.0]))
    >>> tree.total(), tree.find(torch.tensor([0.5, 1.0, 3.9])).tolist()
    (4.0, [0, 2, 2])
    """

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        self.size = size
        self.depth = max(size - 1, 0).bit_length()
        self.num_leaves = 1 << self.depth
        self._nodes = torch.zeros(2 * self.num_leaves, dtype=torch.float64, device=device)

    @property
    def device(self) -> torch.device:
        return self._nodes.device

    @property
    def values(self) -> torch.Tensor:
        """``[size]`` the slot values (a view; write through `set`)."""
        return self._nodes[self.num_leaves : self.num_leaves + self.size]

    def total(self) -> float:
        """The sum of all values."""
        return float(self._nodes[1])  # with one slot, its leaf is the root

    def set(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Sets ``values[k]`` at slot ``indices[k]``; for a repeated slot the last one wins.

        Args:
            indices: ``[N]`` slot indices.
            values: ``[N]`` non-negative values.
        """
        indices, values = _last_per_index(indices.reshape(-1), values.reshape(-1))
        nodes = indices + self.num_leaves
        self._nodes[nodes] = values.to(self._nodes.dtype)
        for _ in range(self.depth):
            nodes = torch.unique(nodes // 2)
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]

    def find(self, prefix_sums: torch.Tensor) -> torch.Tensor:
        """The slots where the running sum of values first exceeds each of ``prefix_sums``.

        Args:
            prefix_sums: ``[N]`` targets in ``[0, total())``.

        Returns:
            ``[N]`` int64 slot indices, each with a positive value while ``total() > 0``.
        """
        target = prefix_sums.to(self._nodes.dtype).clone()
        nodes = torch.ones_like(target, dtype=torch.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sum = self._nodes[left]
            # Rounding can leave a target at or past a subtree's sum; never step into an empty one.
            go_right = (target >= left_sum) & (self._nodes[left + 1] > 0)
            go_right |= left_sum <= 0
            target = torch.where(go_right, target - left_sum, target)
            nodes = left + go_right.long()
        return nodes - self.num_leaves

    def load_values(self, values: torch.Tensor) -> None:
        """Replaces every slot value by ``values`` ``[size]`` and rebuilds the sums."""
        self._nodes.zero_()
        self._nodes[self.num_leaves : self.num_leaves + self.size] = values.to(self._nodes)
        for level in range(self.depth - 1, -1, -1):
            nodes = torch.arange(1 << level, 2 << level, device=self._nodes.device)
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]


def _last_per_index(
    indices: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keeps, for each distinct index, the value given last (index_put is unordered on repeats)."""
    unique, inverse = torch.unique(indices, return_inverse=True)
    if len(unique) == len(indices):
        return indices, values
    order = torch.arange(len(indices), device=indices.device)
    last = torch.full_like(unique, -1).scatter_reduce(0, inverse, order, "amax")
    return unique, values[last]
