"""torch_npu's profiler output: ``*_ascend_pt`` rank directories with ``ASCEND_PROFILER_OUTPUT/``.

One job a module, imported from where they are: :mod:`.discover` finds the rank directories and
what each says of itself; :mod:`.files` reads torch_npu's JSON and CSV files; :mod:`.trace_view`,
:mod:`.csv_tables` and :mod:`.communication` read one kind of file each; :mod:`.text` reads a
rank of the text export from them and :mod:`.db` a rank of the db export; :mod:`.reader` reads
a job's ranks into one Trace, and :mod:`.outline` only each rank's small files of a many-rank job.
"""
