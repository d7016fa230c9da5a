"""A learning-curve PNG drawn with Pillow (already a dependency; no display needed)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT, MARGIN = 720, 420, 60
TICKS = 5  # labelled grid lines per axis


def plot_learning_curve(history: list[dict], path, title: str) -> Path:
    """Mean episode return against env steps, one point per history entry (entries without a
    finished episode are skipped); written atomically to ``path``."""
    points = [(h["env_steps"], h["mean_return"]) for h in history if h["episodes"] > 0]
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    # Pillow's default font at 13 px (its 10 px default renders spaces barely wider than a pixel).
    font = ImageFont.load_default(size=13)
    left, top, right, bottom = MARGIN, 50, WIDTH - MARGIN, HEIGHT - MARGIN
    draw.text((left, 8), title, fill="black", font=font)
    draw.text(((left + right) // 2, HEIGHT - 8), "env steps", fill="black", font=font, anchor="ms")
    draw.text((6, 30), "mean return", fill="black", font=font)
    if points:
        x_max = max(x for x, _ in points) or 1
        y_low, y_high = min(y for _, y in points), max(y for _, y in points)
        if y_high == y_low:
            y_low, y_high = y_low - 1, y_high + 1

        def to_pixel(x, y):
            return (left + (right - left) * x / x_max, bottom - (bottom - top) * (y - y_low) / (y_high - y_low))

        for i in range(TICKS):
            x, y = x_max * i / (TICKS - 1), y_low + (y_high - y_low) * i / (TICKS - 1)
            px, py = to_pixel(x, y)
            draw.line((px, top, px, bottom), fill=(225, 225, 225))
            draw.line((left, py, right, py), fill=(225, 225, 225))
            draw.text((px, bottom + 6), f"{x:,.0f}", fill="black", font=font, anchor="mt")
            draw.text((left - 6, py), f"{y:.4g}", fill="black", font=font, anchor="rm")
        draw.line([to_pixel(x, y) for x, y in points], fill=(31, 119, 180), width=2)
        for x, y in points:
            cx, cy = to_pixel(x, y)
            draw.ellipse((cx - 2, cy - 2, cx + 2, cy + 2), fill=(31, 119, 180))
    else:
        draw.text((left + 10, (top + bottom) // 2), "no episode finished", fill="black", font=font)
    draw.rectangle((left, top, right, bottom), outline="black")
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
