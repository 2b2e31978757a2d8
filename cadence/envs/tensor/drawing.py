"""A tiny numpy rasterizer for the frames tensor-native environments render.

Frames are ``[H, W, 3]`` uint8 RGB arrays with row 0 at the top. Shapes are
given in pixel coordinates ``(x, y)`` with ``x`` to the right and ``y`` down;
they are filled where a pixel's centre lies inside them. This is for videos of
classic-control envs, so it favours a few lines of clear numpy over speed or
anti-aliasing (and need not look like Gymnasium's pygame drawings).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Color = tuple[int, int, int]
Point = tuple[float, float]

WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)


def blank_canvas(height: int, width: int, color: Color = WHITE) -> np.ndarray:
    """A ``[height, width, 3]`` uint8 frame filled with ``color``."""
    frame = np.empty((height, width, 3), dtype=np.uint8)
    frame[...] = color
    return frame


def fill_convex_polygon(frame: np.ndarray, vertices: Sequence[Point], color: Color) -> None:
    """Fills the convex polygon ``vertices`` (either winding order) in place."""
    points = np.asarray(vertices, dtype=np.float64)
    window = _bounding_window(frame, points.min(axis=0), points.max(axis=0))
    if window is None:
        return
    rows, cols, xs, ys = window
    # A point is inside a convex polygon when it is on the same side of every edge.
    crosses = []
    for (x0, y0), (x1, y1) in zip(points, np.roll(points, -1, axis=0), strict=True):
        crosses.append((x1 - x0) * (ys - y0) - (y1 - y0) * (xs - x0))
    crosses = np.stack(crosses)
    inside = np.all(crosses >= 0, axis=0) | np.all(crosses <= 0, axis=0)
    frame[rows, cols][inside] = color


def fill_circle(frame: np.ndarray, center: Point, radius: float, color: Color) -> None:
    """Fills the disc of ``radius`` pixels around ``center`` in place."""
    cx, cy = center
    corner = np.array([radius, radius])
    window = _bounding_window(frame, np.array(center) - corner, np.array(center) + corner)
    if window is None:
        return
    rows, cols, xs, ys = window
    inside = (xs - cx) ** 2 + (ys - cy) ** 2 <= radius**2
    frame[rows, cols][inside] = color  # basic slicing gives a view, so this writes `frame`


def thick_segment(start: Point, end: Point, width: float) -> list[Point]:
    """The four corners of a segment ``width`` pixels thick (a rotated rectangle)."""
    (x0, y0), (x1, y1) = start, end
    length = max(np.hypot(x1 - x0, y1 - y0), 1e-9)
    nx, ny = -(y1 - y0) / length * width / 2, (x1 - x0) / length * width / 2
    return [(x0 + nx, y0 + ny), (x1 + nx, y1 + ny), (x1 - nx, y1 - ny), (x0 - nx, y0 - ny)]


def _bounding_window(
    frame: np.ndarray, low: np.ndarray, high: np.ndarray
) -> tuple[slice, slice, np.ndarray, np.ndarray] | None:
    """The frame slices covering ``[low, high]`` and the pixel-centre coordinates in them."""
    height, width = frame.shape[:2]
    x0, y0 = max(int(np.floor(low[0])), 0), max(int(np.floor(low[1])), 0)
    x1, y1 = min(int(np.ceil(high[0])) + 1, width), min(int(np.ceil(high[1])) + 1, height)
    if x0 >= x1 or y0 >= y1:
        return None
    ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float64) + 0.5
    return slice(y0, y1), slice(x0, x1), xs, ys
