"""A learning-curve PNG drawn with Pillow (already a dependency; no display needed)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

WIDTH, HEIGHT, MARGIN = 720, 420, 60


def plot_learning_curve(history: list[dict], path, title: str) -> Path:
    """Mean episode return against env steps, one point per history entry (entries without a
    finished episode are skipped); written atomically to ``path``."""
    points = [(h["env_steps"], h["mean_return"]) for h in history if h["episodes"] > 0]
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN, MARGIN // 2, WIDTH - MARGIN // 2, HEIGHT - MARGIN
    draw.rectangle((left, top, right, bottom), outline="black")
    draw.text((left, 8), title, fill="black")
    draw.text(((left + right) // 2 - 30, HEIGHT - 22), "env steps", fill="black")
    if points:
        x_max = max(x for x, _ in points) or 1
        y_low, y_high = min(y for _, y in points), max(y for _, y in points)
        if y_high == y_low:
            y_low, y_high = y_low - 1, y_high + 1

        def to_pixel(x, y):
            return (left + (right - left) * x / x_max, bottom - (bottom - top) * (y - y_low) / (y_high - y_low))

        draw.line([to_pixel(x, y) for x, y in points], fill=(31, 119, 180), width=2)
        for x, y in points:
            cx, cy = to_pixel(x, y)
            draw.ellipse((cx - 2, cy - 2, cx + 2, cy + 2), fill=(31, 119, 180))
        draw.text((4, top), f"{y_high:.1f}", fill="black")
        draw.text((4, bottom - 10), f"{y_low:.1f}", fill="black")
        draw.text((right - 60, bottom + 6), f"{x_max:,}", fill="black")
        draw.text((4, (top + bottom) // 2), "return", fill="black")
    else:
        draw.text((left + 10, (top + bottom) // 2), "no episode finished", fill="black")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.close(handle)
    try:
        image.save(temporary, format="PNG")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return path
