"""Many ranks in parallel: reading a rank and summarising it are independent tasks, run on Dask.

By default the tasks run on a local Dask cluster of processes sized to the machine, started for
the job and closed after it; a ``tcp://HOST:8786`` scheduler address sends them to an existing
dask.distributed cluster instead, whose workers must see the same paths (run it next to the
data). Each task is the reader's own function on one rank followed by
:func:`~npumagic.analysis.summary.summarize_rank`, so only per-rank summaries (small tables)
travel back; the cluster views are computed from them by
:func:`~npumagic.analysis.summary.combine`, exactly as the serial path computes them. A job of
one rank never starts Dask.

From :data:`OUTLINE_MIN_RANKS` ranks on, a torch_npu job is by default read as an outline
instead (:mod:`~npumagic.analysis.sources.ascend.outline`): every rank's small files as
msprof-analyze's cluster analysis reads them, for the rank table, links and matrix, and only the
focused rank in full. ``every_rank`` (or naming a scheduler) reads and summarises every rank.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

from . import sources, store
from .collectives import LINK_COLUMNS
from .summary import Summary, combine, rebase, summarize, summarize_rank
from .schema import Trace
from .ranks import parallel_indices, rank_table_of_steps
from .sources.ascend.discover import no_rank_read, rank_numbers
from ..errors import NpumagicError, TraceError

log = logging.getLogger(__name__)

LOCAL = "local"
RANK_KEYED = ("vendor", "sources", "notes", "parallel_groups", "steps_from")  # meta entries keyed by rank id
RANK_LISTS = ("steps_inferred",)  # meta entries listing rank ids
# Below this many ranks a local cluster costs more to start (a few seconds: each worker process
# imports pandas and npumagic) than reading the ranks one after another saves.
MIN_RANKS_LOCAL = 8
# From this many ranks a job is read as an outline by default: reading every rank in full costs
# about half a second a rank (a 256-rank job: minutes), the outline a few milliseconds.
OUTLINE_MIN_RANKS = 8
CONNECT_TIMEOUT_S = 10
LOCAL_TIMEOUTS = {"distributed.comm.timeouts.connect": "180s", "distributed.comm.timeouts.tcp": "180s"}
_ADDRESS = re.compile(r"(?:[a-z]+://)?[\w.\-\[\]:]+:\d+")


def analyze(path: str | Path, rank: int | None = None, scheduler: str | None = None,
            progress: bool = False, every_rank: bool = False) -> Summary:
    """The Summary of any supported profiler output, its ranks read and summarised in parallel.

    Parameters
    ----------
    path : a trace file, a run directory, or a folder of rank directories.
    rank : the rank the Summary describes (default the lowest); every rank is in ``.per_rank``.
    scheduler : ``None`` or ``""`` (a local cluster when the job has at least
        :data:`MIN_RANKS_LOCAL` ranks, else in this process), ``"local"`` (always a local
        cluster when there is more than one rank), ``"serial"`` (in this process), or the
        address of a dask.distributed scheduler (``tcp://HOST:8786``).
    progress : a tqdm bar over ranks.
    every_rank : read and summarise every rank in full even where the job would be read as an
        outline (from :data:`OUTLINE_MIN_RANKS` torch_npu ranks); naming a scheduler implies it.

    Returns
    -------
    Summary : equal to ``summarize(load(path), rank)``; for an outline, the focused rank's
        Summary with the job's rank table (torch_npu's own step breakdown, see
        ``meta["rank_table"]``), links and matrix, and only that rank in ``.per_rank``.

    Raises
    ------
    TraceError : a rank could not be read (raised from the task that read it).
    NpumagicError : the scheduler cannot be reached.
    """
    scheduler = check_scheduler(scheduler)
    fmt, paths = sources.detect(path)
    reader = sources.reader_for(fmt, paths)
    outline = _outline_fits(reader, paths, scheduler, every_rank)
    if not store.enabled():
        return _analyze(reader, fmt, paths, path, rank, scheduler, progress, outline)
    reading, stamps = store.OUTLINE if outline else store.FULL, store.stamps(paths, sources.host_file(path))
    kept = store.open_store(path, stamps, reading, rank)
    if kept is not None:
        return kept
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        summary = _analyze(reader, fmt, paths, path, rank, scheduler, progress, outline)
    for w in caught:  # as they were raised (the store replays them when it is read)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if time.perf_counter() - started >= store.WORTH_S:
        _write(path, summary, stamps, reading, rank, caught)
    return summary


def _analyze(reader: sources.Reader, fmt: str, paths: list[Path], path: str | Path, rank: int | None,
             scheduler: str, progress: bool, outline: bool) -> Summary:
    if outline:
        return _outline(reader, path, paths, rank, progress)
    groups = reader.rank_groups(paths)
    if not _on_dask(len(groups), scheduler):
        return summarize(sources.load(path, progress=progress, found=(fmt, paths)), rank)
    results = _run_on_dask(reader, groups, scheduler, progress)
    read, metas, unreadable = [], [], {}
    for group, (per_rank, meta, caught, error) in zip(groups, results):
        for message in caught:
            warnings.warn(message, stacklevel=2)
        if error is not None:  # as the reader does: a rank that cannot be read is left out
            unreadable[str(group[0])] = str(error)
            warnings.warn(f"{error} (this rank is left out; the others are analysed)", stacklevel=2)
            continue
        read += list(per_rank.items())
        metas.append(meta)
    if not read:
        raise no_rank_read(paths, unreadable)
    renumber = rank_numbers(paths, [r for r, _ in read]) != [r for r, _ in read]  # as the reader numbers them
    if renumber:
        metas = [_renumbered(m, i) for i, m in enumerate(metas)]
    job = sources.merge_meta(fmt, paths, metas, unreadable)
    host = sources.host_file(path)
    if host is not None:
        # npumagic's host samples belong to the job's lowest rank, as the serial reader adds them:
        # that rank is read again here with them (the others never see them)
        lowest = 0 if renumber else min(r for r, _ in read)
        i = next(i for i, (r, _) in enumerate(read) if (i if renumber else r) == lowest)
        group = [g for g in groups if str(g[0]) not in unreadable][i]
        again, _, _, error = summarize_group(reader, group, host=str(path))
        if error is not None:
            raise error
        read[i] = next(iter(again.items()))
    per_rank = {i if renumber else r: rebase(s, job, rank=i if renumber else None) for i, (r, s) in enumerate(read)}
    return combine(per_rank, rank)


def _renumbered(meta: dict, rank: int) -> dict:
    """A rank's meta with its entries keyed by (or listing) its rank id given the id ``rank``."""
    return {k: ({rank: v for v in meta[k].values()} if k in RANK_KEYED else [rank for _ in meta[k]]
                if k in RANK_LISTS else meta[k]) for k in meta}


def summarize_group(reader: sources.Reader, paths: list[Path], host: str | None = None
                    ) -> tuple[dict[int, Summary], dict, list[str], TraceError | None]:
    """One task: read one rank's files with ``reader`` and summarise it (with npumagic's host
    samples from the run directory ``host``, where given).

    Returns the summary of each rank read (one), the meta of what was read without the vendor
    tables (the summaries already hold what they need of them), the warnings raised, and the
    TraceError when a rank cannot be read and the reader leaves such ranks out (the job goes on
    without it; torch_npu's ranks).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trace = reader.read(paths)
            if host is not None:
                trace = sources.with_host_samples(trace, host)
        except TraceError as exc:
            if not reader.leaves_out_unreadable:
                raise
            return {}, {}, [str(w.message) for w in caught], exc
        per_rank = {r: summarize_rank(trace, r) for r in (trace.ranks or [0])}
    meta = {k: v for k, v in trace.meta.as_dict().items() if k != "vendor"}
    return per_rank, meta, [str(w.message) for w in caught], None


def read(path: str | Path, rank: int | None = None, scheduler: str | None = None, progress: bool = False,
         every_rank: bool = False) -> tuple[Trace | None, Summary | None]:
    """The route from a profiler output path to its analysis that every shell takes, for a caller
    that keeps the Trace where there is one (a run's timeline): ``(None, Summary)`` where the job
    is read rank by rank (:func:`reads_apart`: on Dask, or as an outline), else ``(Trace, None)``
    read in this process, its Summary left to the caller (:func:`~npumagic.analysis.summary.summarize`
    with ``rank``). Arguments as :func:`analyze`'s; a ``rank`` the job does not hold is a ValueError."""
    kept = _stored(path, rank, scheduler, every_rank)
    if kept is not None:
        return None, kept
    if reads_apart(path, scheduler, every_rank):
        return None, analyze(path, rank=rank, scheduler=scheduler, progress=progress, every_rank=every_rank)
    trace = sources.load(path, progress=progress)
    if rank is not None and rank not in (trace.ranks or [0]):
        raise ValueError(f"rank {rank} not in trace; ranks: {trace.ranks}")
    return trace, None


def _stored(path: str | Path, rank: int | None, scheduler: str | None, every_rank: bool) -> Summary | None:
    """The Summary :func:`analyze` would give, from the job's store where one can be trusted."""
    if not store.enabled():
        return None
    fmt, paths = sources.detect(path)
    reader = sources.reader_for(fmt, paths)
    outline = _outline_fits(reader, paths, check_scheduler(scheduler), every_rank, say_why=False)
    return store.open_store(path, store.stamps(paths, sources.host_file(path)),
                            store.OUTLINE if outline else store.FULL, rank)


def keep(path: str | Path, summary: Summary, rank: int | None, recorded: bool) -> None:
    """Write the store of ``summary``, read in this process from ``path`` (a Trace summarised:
    every rank in full; ``recorded``: a run whose Summary holds what its capture added, kept for
    queries and never served for ``path``), unless a store that can be trusted is there."""
    if not store.enabled():
        return
    try:
        fmt, paths = sources.detect(path)
        stamps = store.stamps(paths, sources.host_file(path))
    except (OSError, TraceError):
        return
    if store.stale(store.manifest_of(store.location(path)), stamps):
        _write(path, summary, stamps, store.RUN if recorded else store.FULL, rank)


def _write(path, summary: Summary, stamps: dict, reading: str, rank: int | None, caught=()) -> None:
    try:
        store.write(path, summary, stamps, reading, rank, caught)
    except Exception as exc:  # noqa: BLE001 - the store is a cache: an analysis never fails for it
        log.debug("no store written for %s", path, exc_info=True)
        store.say(f"no store of {path}'s tables ({type(exc).__name__}: {exc})")


def reads_apart(path: str | Path, scheduler: str | None = None, every_rank: bool = False) -> bool:
    """Whether :func:`analyze` reads ``path`` rank by rank (on Dask, or as an outline) and gives
    only a Summary; else it reads one Trace in this process."""
    fmt, paths = sources.detect(path)
    reader = sources.reader_for(fmt, paths)
    scheduler = check_scheduler(scheduler)
    return (_outline_fits(reader, paths, scheduler, every_rank, say_why=False)
            or _on_dask(len(reader.rank_groups(paths)), scheduler))


def _outline_fits(reader: sources.Reader, paths: list[Path], scheduler: str, every_rank: bool,
                  say_why: bool = True) -> bool:
    if reader.outline is None or every_rank or scheduler or len(paths) < OUTLINE_MIN_RANKS:
        return False
    unfit = reader.outline.unfit(paths)
    if say_why and unfit and len(unfit) < len(paths):  # read in full for a few ranks: say why it is slow
        warnings.warn(f"{len(unfit)} of the {len(paths)} ranks ({unfit[0].name}{', ...' if len(unfit) > 1 else ''}) "
                      "have no step_trace_time.csv or are db exports: every rank is read in full", stacklevel=4)
    return not unfit


def _outline(reader: sources.Reader, path: str | Path, paths: list[Path], rank: int | None, progress: bool) -> Summary:
    """The job read as an outline (every rank's small files) with ``rank`` (default the lowest)
    read and summarised in full."""
    bar = None
    if progress:
        bar = sources.progress_bar_class()(total=len(paths), desc=f"reading {Path(path).name}", unit="rank",
                                            leave=False, delay=0.5)
    try:
        outline = reader.outline.read(paths, bar)
    finally:
        if bar is not None:
            bar.close()
    if rank is not None and rank not in outline.dirs:
        raise ValueError(f"rank {rank} not in trace; ranks: {outline.ranks}")
    # the rank asked for, else the lowest that can be read in full
    for focus in [rank] if rank is not None else outline.ranks:
        host = str(path) if focus == min(outline.ranks) and sources.host_file(path) is not None else None
        per_rank, meta, caught, error = summarize_group(reader, [outline.dirs[focus]], host=host)
        for message in caught:
            warnings.warn(message, stacklevel=3)
        if error is None:
            break
        if rank is not None or focus == outline.ranks[-1]:
            raise error
        warnings.warn(f"{error} (rank {focus} cannot be read in full: the next rank is described; its step_trace_time.csv "
                      "and communication files are in the rank table)", stacklevel=3)
    (read_as, full), = per_rank.items()
    metas = {**outline.metas, focus: meta if read_as == focus else _renumbered(meta, focus)}
    job = sources.merge_meta(reader.name, paths, list(metas.values()), outline.unreadable)
    full = rebase(full, job, rank=focus if read_as != focus else None)
    indices = {r: parallel_indices(job["parallel_groups"].get(r, {}), r) for r in outline.ranks}
    meta = dict(full.meta, rank_table=(f"torch_npu's own step breakdown (step_trace_time.csv) of each of the "
                                       f"{len(outline.ranks)} ranks; rank {focus} alone read in full"))
    return replace(full, ranks=rank_table_of_steps(outline.steps, outline.ranks, indices),
                   links=outline.links[LINK_COLUMNS], matrix=outline.matrix, per_rank={focus: full}, meta=meta)


def _on_dask(n_groups: int, scheduler: str) -> bool:
    if n_groups <= 1 or scheduler == "serial":
        return False
    return bool(scheduler) or n_groups >= MIN_RANKS_LOCAL


def check_scheduler(scheduler: str | None) -> str:
    """``scheduler`` cleaned: "", "local", "serial" or a scheduler address; NpumagicError otherwise."""
    scheduler = (scheduler or "").strip()
    if scheduler in ("", LOCAL, "serial") or _ADDRESS.fullmatch(scheduler):
        return scheduler
    raise NpumagicError(f"scheduler {scheduler!r} is not a Dask scheduler address (tcp://HOST:PORT), "
                        "'local' or 'serial'")


def _run_on_dask(reader: sources.Reader, groups: list[list[Path]], scheduler: str, progress: bool) -> list:
    from distributed import Client, as_completed

    cluster = None
    try:
        if scheduler in ("", LOCAL):
            cluster = _local_cluster(len(groups))
            client = Client(cluster)
        else:
            _probe(scheduler)
            client = _connect(Client, scheduler)
    except (OSError, TimeoutError, ValueError) as exc:
        if cluster is not None:
            cluster.close()
        raise NpumagicError(f"cannot reach the Dask scheduler {scheduler or 'local'} ({exc})") from None
    bar = None
    try:
        groups = [[p.resolve() for p in g] for g in groups]
        futures = client.map(summarize_group, [reader] * len(groups), groups, pure=False)
        if progress:
            tqdm = sources.progress_bar_class()
            bar = tqdm(total=len(futures), desc=f"summarising ranks on {client.scheduler.address}", unit="rank",
                       leave=False, delay=0.5)
            for _ in as_completed(futures):
                bar.update(1)
        return client.gather(futures)
    finally:
        if bar is not None:
            bar.close()
        client.close()
        if cluster is not None:
            cluster.close()


def _connect(client_class, scheduler: str):
    """A Dask client of the scheduler at ``scheduler`` (its handshake already checked by
    :func:`_probe`). What the peer sends after its handshake is decoded by Dask, whose decoder
    raises its own errors on bytes that are no Dask message (``struct.error``, msgpack's): those
    are one NpumagicError naming the address; OSError and TimeoutError are the caller's."""
    try:
        return client_class(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        raise
    except Exception as exc:  # noqa: BLE001 - the peer's bytes, whatever Dask's decoder made of them
        raise NpumagicError(f"the Dask scheduler {scheduler} answered its handshake, then with something that is no "
                            f"Dask message (Dask's decoder raised {_qualified(exc)}): is it a Dask scheduler of this version?") from None


def _qualified(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


MAX_HANDSHAKE_BYTES = 2**20  # a scheduler's handshake is a few hundred bytes


def _probe(scheduler: str) -> None:
    """Check that a tcp:// ``scheduler`` speaks first as a Dask scheduler does (its handshake: an
    8-byte length, then that many bytes, which decode to Dask's handshake, see
    :func:`_check_handshake`) within :data:`CONNECT_TIMEOUT_S`; NpumagicError otherwise. Dask
    itself would wait forever on a port that accepts and never answers, allocate whatever length
    an HTTP server or other service sends back (exabytes), and raise its decoder's own errors
    (``struct.error`` on a frame of one byte)."""
    import socket
    import struct

    scheme, _, rest = scheduler.rpartition("://")
    if scheme not in ("", "tcp"):
        return  # tls, ws, ...: Dask's own connection checks them
    host, _, port = rest.rpartition(":")
    refuse = lambda why: NpumagicError(f"the Dask scheduler {scheduler} {why}")  # noqa: E731
    # an unreachable address raises OSError here: the caller's "cannot reach" error
    with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S) as sock:
        try:
            (size,) = struct.unpack("<Q", _read_exactly(sock, 8))
            if not 0 < size <= MAX_HANDSHAKE_BYTES:
                raise refuse(f"answered with something that is no Dask handshake (a frame of {size} bytes): is it "
                             "another service's port?")
            _check_handshake(_read_exactly(sock, size), refuse)
        except TimeoutError:
            raise refuse(f"did not answer within {CONNECT_TIMEOUT_S} s (it accepted the connection but sent nothing, "
                         "as an HTTP server or a stopped process does): is it the scheduler's port?") from None
        except OSError as exc:
            raise refuse(f"closed the connection before its handshake ({exc.strerror or exc})") from None


def _check_handshake(frame: bytes, refuse) -> None:
    """Decode ``frame`` as Dask's client does a scheduler's first message (its frames, then
    msgpack) and check it holds what the client reads from it (compression, pickle protocol);
    ``refuse(why)`` otherwise. Any error of the decoder counts: the bytes are the peer's."""
    from distributed.protocol.core import loads
    from distributed.protocol.utils import unpack_frames

    try:
        frames, missing = unpack_frames(frame, partial=True)
        info = loads(frames, deserialize=False) if not missing else None
    except Exception as exc:  # noqa: BLE001 - struct.error, AssertionError, msgpack's: all mean "not Dask"
        info = exc
    if not (isinstance(info, dict) and {"compression", "pickle-protocol"} <= info.keys()):
        plural = "" if len(frame) == 1 else "s"
        raise refuse(f"answered with something that is no Dask handshake (a frame of {len(frame)} byte{plural} that "
                     "does not decode to one): is it another service's port?")


def _read_exactly(sock, n: int) -> bytes:
    """``n`` bytes from ``sock``, all within its timeout (a peer sending a byte at a time too)."""
    import time

    deadline, data = time.monotonic() + sock.gettimeout(), b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        more = sock.recv(min(n - len(data), 2**16))
        if not more:
            raise ConnectionError("end of stream")
        data += more
    return data


def _local_cluster(n_tasks: int):
    import dask
    from distributed import LocalCluster

    workers = max(1, min(n_tasks, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
    log.debug("starting a local Dask cluster of %d worker processes", workers)
    # a worker process imports pandas and npumagic before it connects: on a busy machine that
    # can pass Dask's 30 s default
    spawnable_main()
    with dask.config.set(LOCAL_TIMEOUTS):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                            silence_logs=logging.ERROR)


def spawnable_main() -> None:
    """Let worker processes be spawned from this one: IPython's %reset (and pytest-xdist's
    workers) leave a ``__main__`` without ``__spec__``, which spawning reads; an interactive
    ``__main__`` has ``__spec__ = None``."""
    main = sys.modules.get("__main__")
    if main is not None and not hasattr(main, "__spec__"):
        main.__spec__ = None
