"""Video files: mp4 for `play` and the run's ``videos/``, and animated images for TensorBoard."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary


def write_mp4(path: Path, frames: Sequence[np.ndarray] | np.ndarray, fps: int = 30) -> None:
    """Writes RGB ``[H, W, 3]`` uint8 frames to an H.264 mp4 (even sizes, as players require)."""
    import imageio.v2 as imageio

    if len(frames) == 0 or frames[0] is None:
        raise ValueError(
            "the environment rendered no frames; does it support render_mode='rgb_array'?"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(
        path, fps=fps, codec="libx264", macro_block_size=1, pixelformat="yuv420p"
    ) as writer:
        for frame in frames:
            writer.append_data(_even_size(np.asarray(frame, dtype=np.uint8)))


def encode_gif(tag: str, frames: np.ndarray, fps: int = 10) -> Summary:
    """A TensorBoard summary showing uint8 ``[T, H, W, 3]`` frames as an animated GIF (the
    form TensorBoard's image dashboard plays)."""
    import imageio.v2 as imageio

    buffer = io.BytesIO()
    imageio.mimsave(buffer, list(frames), format="GIF", duration=1000 / fps, loop=0)
    height, width = frames.shape[1:3]
    image = Summary.Image(
        height=height, width=width, colorspace=3, encoded_image_string=buffer.getvalue()
    )
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def _even_size(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    return frame[: height - height % 2, : width - width % 2]
