"""A case: one exact, replayable choice of sizes, dtypes, values and layouts for a problem."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch


@dataclass(frozen=True)
class Case:
    """Everything needed to rebuild one set of inputs bit for bit.

    sizes: axis name -> size.
    dtype_config: index into `Problem.dtype_configs()`.
    values: input name -> distribution name (inputs not named use their role's default).
    layouts: input name -> layout name (inputs not named are contiguous).
    seed: seeds every draw of the case.
    label: where the shape came from ("workload 0", "boundary hidden=1025", ...).
    rows: (axis, start, stop): the inputs are drawn at `sizes`, then every tensor that has
        `axis` keeps only its entries [start, stop) along it (a row computed alone, to set
        next to the same row inside the batch); None for the whole case. A window past the end
        of the axis (sizes shrunk after it was chosen) slides back to end at the axis's end.
    """

    sizes: tuple[tuple[str, int], ...]
    dtype_config: int = 0
    values: tuple[tuple[str, str], ...] = ()
    layouts: tuple[tuple[str, str], ...] = ()
    seed: int = 0
    label: str = ""
    rows: tuple[str, int, int] | None = None

    def size_map(self) -> dict[str, int]:
        """Every axis's size as the inputs have it (the row window's width along its axis)."""
        sizes = dict(self.sizes)
        window = self.row_window()
        if window is not None:
            axis, start, stop = window
            sizes[axis] = stop - start
        return sizes

    def row_window(self) -> tuple[str, int, int] | None:
        """`rows` fitted into the axis's size in `sizes`: a window that would run past the end
        slides back (a shrunk case keeps its last row the last one), and is cut to the size."""
        if self.rows is None:
            return None
        axis, start, stop = self.rows
        size = dict(self.sizes).get(axis)
        if size is None:
            return self.rows
        width = max(stop - start, 0)
        start = max(min(start, size - width), 0)
        return axis, start, min(start + width, size)

    def with_rows(self, axis: str, start: int, stop: int, label: str | None = None) -> Case:
        return replace(self, rows=(axis, start, stop), label=self.label if label is None else label)

    def value_of(self, name: str, default: str) -> str:
        return dict(self.values).get(name, default)

    def layout_of(self, name: str) -> str:
        return dict(self.layouts).get(name, "contiguous")

    def with_sizes(self, sizes: dict[str, int], label: str | None = None) -> Case:
        return replace(
            self, sizes=tuple(sizes.items()), label=self.label if label is None else label
        )

    def with_value(self, name: str, distribution: str) -> Case:
        values = dict(self.values)
        values[name] = distribution
        return replace(self, values=tuple(sorted(values.items())))

    def with_layout(self, name: str, layout: str) -> Case:
        layouts = dict(self.layouts)
        if layout == "contiguous":
            layouts.pop(name, None)
        else:
            layouts[name] = layout
        return replace(self, layouts=tuple(sorted(layouts.items())))

    def describe(self) -> str:
        """One line a person can read: sizes, dtypes, distributions, layouts."""
        parts = [" ".join(f"{k}={v}" for k, v in self.sizes)]
        if self.values:
            parts.append(", ".join(f"{k}~{v}" for k, v in self.values))
        if self.layouts:
            parts.append(", ".join(f"{k}:{v}" for k, v in self.layouts))
        if self.rows is not None:
            axis, start, stop = self.rows
            parts.append(f"rows {axis}[{start}:{stop}] alone")
        parts.append(f"seed={self.seed}")
        return " | ".join(parts)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sizes": dict(self.sizes),
            "dtype_config": self.dtype_config,
            "values": dict(self.values),
            "layouts": dict(self.layouts),
            "seed": self.seed,
            "label": self.label,
        }
        if self.rows is not None:
            data["rows"] = list(self.rows)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        rows = data.get("rows")
        return cls(
            sizes=tuple((str(k), int(v)) for k, v in data["sizes"].items()),
            dtype_config=int(data.get("dtype_config", 0)),
            values=tuple(sorted((str(k), str(v)) for k, v in data.get("values", {}).items())),
            layouts=tuple(sorted((str(k), str(v)) for k, v in data.get("layouts", {}).items())),
            seed=int(data.get("seed", 0)),
            label=str(data.get("label", "")),
            rows=None if rows is None else (str(rows[0]), int(rows[1]), int(rows[2])),
        )


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
