"""Render folded stacks (`frame;frame;frame value` lines, what `prof.export_stacks` writes) as an SVG flame graph.

A small, dependency-free replacement for Brendan Gregg's flamegraph.pl: no Perl script to fetch. The root is at
the bottom, each frame's width is its inclusive value, and every box has a tooltip with the frame's name,
value and share of the total.

    python -m stepscope.capture.flamegraph stacks.folded > flame.svg
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from html import escape

ROW_PX = 17
WIDTH_PX = 1200
MIN_PX = 0.3  # frames narrower than this are not drawn


@dataclass
class Frame:
    name: str
    value: float = 0.0
    children: dict[str, Frame] = field(default_factory=dict)


def parse_folded(text: str) -> Frame:
    root = Frame("all")
    for line in text.splitlines():
        stack, _, value = line.strip().rpartition(" ")
        if not stack:
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        if v <= 0:
            continue
        root.value += v
        node = root
        for name in stack.split(";"):
            node = node.children.setdefault(name, Frame(name))
            node.value += v
    return root


THREAD_ROOT = "threading.py("  # a Python thread's stacks start in threading.py's _bootstrap
THREAD_PREFIX_FRAMES = 4  # _bootstrap;_bootstrap_inner;run;<the thread's target>


def _runs_torch(frame: str) -> bool:
    return frame.startswith("nn.Module:") or "torch/" in frame or "Tensor_object" in frame


def keep_working_threads(folded: str) -> str:
    """Only the stacks of threads that ran torch code: the training thread and e.g. a pin-memory thread.

    Python call events count wall time, so an idle thread (TensorBoard's event writer, tqdm's monitor) adds
    one wide bar per thread of pure waiting, which would dwarf the training step. Lines of other threads
    are dropped; a thread is told apart by its first frames (its root, or threading's bootstrap and target)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for line in folded.splitlines():
        stack = line.strip().rpartition(" ")[0]
        frames = stack.split(";")
        key = tuple(frames[:THREAD_PREFIX_FRAMES]) if frames[0].startswith(THREAD_ROOT) else (frames[0],)
        groups.setdefault(key, []).append(line)
    kept = [ln for lines in groups.values() if any(_runs_torch(f) for ln in lines for f in ln.split(";"))
            for ln in lines]
    return "\n".join(kept) + ("\n" if kept else "")


def _depth(f: Frame) -> int:
    return 1 + max((_depth(c) for c in f.children.values()), default=0)


def _color(name: str) -> str:
    h = sum(ord(c) for c in name)
    return f"rgb({205 + h % 50},{80 + (h * 7) % 120},{40 + (h * 13) % 40})"


def render_flamegraph(folded: str, title: str = "flame graph", unit: str = "") -> str:
    root = parse_folded(folded)
    depth = _depth(root)
    height = (depth + 2) * ROW_PX
    total = root.value or 1.0
    scale = WIDTH_PX / total
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<text x="4" y="13">{escape(title)}: {root.value:.0f} {escape(unit)} in all</text>']

    def draw(f: Frame, x: float, level: int) -> None:
        w = f.value * scale
        if w < MIN_PX:
            return
        y = height - (level + 1) * ROW_PX
        tip = f"{f.name} ({f.value:.0f} {unit}, {100 * f.value / total:.2f}%)"
        out.append(f'<g><title>{escape(tip)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
                   f'height="{ROW_PX - 1}" fill="{_color(f.name)}" rx="2"/>')
        chars = int(w / 7)
        if chars >= 3:
            label = f.name if len(f.name) <= chars else f.name[: chars - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + ROW_PX - 5}">{escape(label)}</text>')
        out.append("</g>")
        cx = x
        for child in sorted(f.children.values(), key=lambda c: c.name):
            draw(child, cx, level + 1)
            cx += child.value * scale

    draw(root, 0.0, 0)
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        sys.stdout.write(render_flamegraph(fh.read(), title=sys.argv[1]))
