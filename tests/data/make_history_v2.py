"""How history_v2.sqlite was written: npumagic as of commit 7c86840 (schema version 2, before the
verified fixes' table), two real CPU runs with their Summaries and a note. Run with that commit's
package first on the path:

    git archive 7c86840 | tar -x -C /tmp/v2 && PYTHONPATH=/tmp/v2 python make_history_v2.py OUT_DIR history_v2.sqlite
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
ip.run_line_magic("npunote", 'baseline "written by npumagic 7c86840"')
db = sqlite3.connect(f"{out}/history.sqlite")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
dst = sqlite3.connect(sys.argv[2]); db.backup(dst); dst.execute("PRAGMA journal_mode=DELETE"); dst.close()
print(ip.run_line_magic("npuruns", ""))
