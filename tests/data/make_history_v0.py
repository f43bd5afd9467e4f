"""How history_v0.sqlite was written: npumagic as of commit 4181b85 (the schema before versions),
two real CPU runs and a note. Run with that commit's package first on the path:

    git archive 4181b85 | tar -x -C /tmp/v0 && PYTHONPATH=/tmp/v0 python make_history_v0.py OUT_DIR history_v0.sqlite
"""
import sqlite3, sys
from IPython.core.interactiveshell import InteractiveShell
out = sys.argv[1]
ip = InteractiveShell.instance(colors="NoColor")
ip.run_line_magic("load_ext", "npumagic")
ip.run_line_magic("config", f"NpuMagics.output_dir = {out!r}")
ip.run_cell("import torch, time; m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)")
for name, delay in (("baseline", 0.003), ("fixed", 0.0)):
    r = ip.run_cell(f"%%npuprofile --repeat-cell --wait 0 --warmup 1 --steps 3 --no-plot --quiet --name {name}\n"
                    f"time.sleep({delay}); m(torch.randn(4, 8)).sum().backward(); opt.step()")
    assert r.success, r.error_in_exec
ip.run_line_magic("npunote", 'baseline "written by npumagic 4181b85"')
db = sqlite3.connect(f"{out}/history.sqlite")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
dst = sqlite3.connect(sys.argv[2]); db.backup(dst); dst.execute("PRAGMA journal_mode=DELETE"); dst.close()
print(ip.run_line_magic("npuruns", ""))
