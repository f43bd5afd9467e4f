"""Every output npumagic derives from the shared profiler data, as one JSON file: a move of code
that changes no behaviour leaves it byte-identical.

    python bench/snapshot.py --save before.json      # before the move
    python bench/snapshot.py --check before.json     # after it: exit 1 naming what changed

For each input under ../shared/data (or --data DIR): the Summary's figures and tables, the
checklist, the advice with every finding (low ones too), their text and HTML as a notebook shows
them, the rank table of multi-rank jobs and the comparison of each input with itself."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import warnings
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def inputs(data: Path) -> list[Path]:
    """Each profiler output under ``data``: the Kineto files and folders of cuda/, the torch_npu
    jobs of ascend/."""
    cuda = [p for p in (data / "cuda").glob("*/*") if p.is_dir() or p.name.endswith((".json", ".json.gz"))]
    ascend = [p.parent for p in (data / "ascend").rglob("*") if p.name.endswith("_ascend_pt") and p.is_dir()]
    return sorted(set(cuda) | set(ascend))


STYLER_ID = re.compile(r"T_[0-9a-f]{5}")  # pandas' Styler names its table with a random id


def outputs(path: Path) -> dict[str, str]:
    """Every derived output of one input, as text."""
    import npumagic
    from npumagic import jsonout
    from npumagic.analysis.advice import advise_run
    from npumagic.analysis.compare import compare

    summary = npumagic.analyze(path)
    verdict = npumagic.checklist(summary)
    advice = advise_run(summary, str(path), every_rank=True, low=True)
    same = compare(summary, summary, "a", "b")
    out = {"summary": jsonout.dumps(jsonout.summary_doc(summary)), "summary_text": str(summary),
           "checklist": jsonout.dumps(jsonout.verdict_doc(verdict)), "checklist_text": str(verdict),
           "checklist_html": verdict._repr_html_(), "advice": jsonout.dumps(jsonout.advice_doc(advice, "x")),
           "advice_text": str(advice), "advice_html": advice._repr_html_(),
           "comparison": jsonout.dumps(jsonout.comparison_doc(same)), "comparison_text": str(same)}
    for i, finding in enumerate(advice):
        out[f"finding{i}_text"] = str(finding)
    return {key: STYLER_ID.sub("T_styler", text) for key, text in out.items()}


def snapshot(data: Path) -> dict[str, dict[str, str]]:
    warnings.simplefilter("ignore")
    taken = {}
    for path in inputs(data):
        name = str(path.relative_to(data))
        try:
            taken[name] = outputs(path)
        except Exception as error:  # an input that is refused is refused the same way after the move
            taken[name] = {"error": f"{type(error).__name__}: {error}"}
        print(f"{name}: {len(taken[name])} outputs", file=sys.stderr)
    return taken


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--save", type=Path, help="write the outputs here")
    what.add_argument("--check", type=Path, help="compare the outputs with those saved here")
    args = parser.parse_args(argv)
    if not inputs(args.data.resolve()):  # a checkout elsewhere finds no ../shared/data: never "0 changed"
        parser.error(f"no profiler outputs under {args.data}: name the shared data with --data")
    now = snapshot(args.data.resolve())  # one spelling of the inputs' paths, whichever link led there
    if args.save:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True))
        print(f"{sum(map(len, now.values()))} outputs of {len(now)} inputs saved in {args.save}")
        return 0
    before = json.loads(args.check.read_text())
    changed = [f"{name}: {key}" for name in sorted(before.keys() | now.keys())
               for key in sorted(before.get(name, {}).keys() | now.get(name, {}).keys())
               if before.get(name, {}).get(key) != now.get(name, {}).get(key)]
    for line in changed:
        name, key = line.split(": ")
        print(f"changed {line} ({digest(before.get(name, {}).get(key) or '')} -> {digest(now.get(name, {}).get(key) or '')})")
    print(f"{len(changed)} of {sum(map(len, now.values()))} outputs of {len(now)} inputs changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
