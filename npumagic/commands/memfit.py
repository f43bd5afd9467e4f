"""``memfit``: will it fit (:mod:`npumagic.analysis.memory_fit`): the peak at another batch size or
sequence length from runs at two or more sizes, against the device's capacity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NpumagicError
from .base import Arg, Command, Result


@dataclass(frozen=True)
class FitAnswer(Result):
    labels: tuple[str, ...]
    prediction: Any  # FitPrediction

    def to_dict(self) -> dict[str, Any]:
        from ..analysis.memory_fit import ASSUMPTION
        from ..jsonout import document

        p = self.prediction
        return document("memfit", runs=[{"size": s, "path": label, "peak_allocated_bytes": peak}
                                        for s, label, peak in zip(p.sizes, self.labels, p.peaks)],
                        at_size=p.at_size, predicted_allocated_bytes=p.predicted_allocated_bytes,
                        interval_bytes=p.interval, predicted_reserved_bytes=p.predicted_reserved_bytes,
                        fixed_bytes=p.fixed_bytes, per_item_bytes=p.per_item_bytes, capacity_bytes=p.capacity_bytes,
                        fits=p.fits, largest_size=p.largest_size, assumption=ASSUMPTION)

    def text(self, width: int | None = None) -> str:
        return self.prediction.sentence()


def _pairs(places, runs: str) -> list[tuple[int, str]]:
    pairs = []
    for part in filter(None, (p.strip() for p in runs.split(","))):
        size, sep, ref = part.partition("=")
        if not sep:  # a run of the history: its DataLoader's batch size
            size, ref = _recorded_batch(places, part), part
        if not str(size).strip().isdecimal() or int(size) < 1 or not ref.strip():
            raise NpumagicError(f"{part!r}: give each run as SIZE=PATH_OR_RUN (e.g. 8=runs/b8,16=runs/b16)")
        pairs.append((int(size), ref.strip()))
    if len({s for s, _ in pairs}) < 2:
        raise NpumagicError("give runs at two or more different sizes: SIZE=PATH_OR_RUN,SIZE=PATH_OR_RUN")
    return pairs


def _recorded_batch(places, ref: str) -> str:
    """The batch size the run ``ref`` of the history recorded for its DataLoader ("" where none)."""
    path, name = places.locate(ref)
    if name is None:
        return ""
    loaders = places.runs.context(name).get("dataloaders") or []
    sizes = {d.get("batch_size") for d in loaders if isinstance(d, dict) and isinstance(d.get("batch_size"), int)}
    if len(sizes) != 1:
        raise NpumagicError(f"run {name!r} recorded {'no DataLoader batch size' if not sizes else 'several batch sizes'}: "
                            f"give it as SIZE={name}")
    return str(sizes.pop())


def memfit(places, runs: str, at: int | None = None, capacity_gib: float | None = None,
           rank: int | None = None) -> FitAnswer:
    from ..analysis.memory_fit import predict_fit
    from .memory import read_view

    if at is None or at < 1:
        raise NpumagicError("give the size to predict with --at N (1 or more)")
    if capacity_gib is not None and not capacity_gib > 0:
        raise NpumagicError(f"--capacity-gib must be above 0, not {capacity_gib}")
    read = [(size, *read_view(places, ref, rank)) for size, ref in _pairs(places, runs)]
    prediction = predict_fit([(size, view) for size, _, view in read], at,
                             capacity_gib * 2**30 if capacity_gib else None)
    return FitAnswer(tuple(label for _, label, _ in read), prediction)


COMMAND = Command(
    "memfit", "will it fit: the peak at another batch size from runs at two or more sizes, against the capacity",
    (Arg("runs", "the runs measured, SIZE=PATH_OR_RUN separated by commas (8=runs/b8,16=runs/b16); a run of the "
                 "history alone takes its DataLoader's batch size",
         positional=True, metavar="SIZES"),
     Arg("at", "the size to predict", int, metavar="N"),
     Arg("capacity_gib", "the device's memory in GiB (default: what the trace records)", float),
     Arg("rank", "rank of a job to read (the rank-th, default the first)", int)),
    memfit, about="Predict the peak allocated and reserved memory at batch size (or sequence length) N from runs "
                  "of one configuration at two or more sizes (a least-squares line through their step peaks; a 95% "
                  "prediction interval from three sizes on), whether it fits in the device's capacity (under 90% "
                  "of it), and the largest size that does. The assumption is stated with the answer.")
