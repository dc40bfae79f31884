"""The analysis of a trace as a stream: model and hazards in one pass, batch by batch.

``build_model`` + ``find_hazards`` need every event in memory (a few hundred bytes each);
a real run's trace has tens of millions. Here the events come in batches, each batch goes
through the model builder (which keeps no event: ``build.Builder(keep_events=False)``),
then through the access pass; a binding is checked once every binding begun before it has
ended; re-plans are counted as they come. What stays in memory is the model's records and
the findings, never the events. The hazards are those ``find_hazards`` reports on the same
trace (``tests/analysis/test_stream.py`` compares both over the traces the tests build).

Fed column batches (``feed_columns``: ``vizalloc.trace.columns``), it also skips
repetition: the same step done again and again (``repeat.py`` finds them in the columns).
The first two steps of a repetition are analysed while every read of the state they make
is noted (``observe.py``); when the second read exactly what the first read, nothing a
step saw came from the step before, so every repetition would see the same and find the
same: the steps in between are counted instead of analysed (``runs.py`` makes their records
when asked), and the last one is analysed again, its reads checked against the second's.
Analysis time and memory per repeated step are then a few numbers, not its events.

A step may also read what the step right before it wrote, where the first step read
what *its* predecessor wrote at the same place (a KV cache written at one token and read
at the next, llama.cpp's one graph computed again): the last writer's seq and ids then
move by one step's move, and nothing else differs. Every step sees the same state moved
along, so finds the same. Such a *relative* run may write entries of older objects only in
the access pass' last writes, which are moved along for the last step
(``StreamAnalysis._move_writes``) before it is analysed and checked.

    >>> from vizalloc.analysis.stream import analyse_events
    >>> model, hazards = analyse_events([[]])
    >>> model.n_events, hazards
    (0, [])
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import numpy as np

from vizalloc.analysis import runs as runs_mod
from vizalloc.analysis.build import Builder
from vizalloc.analysis.dynamic import AccessScan
from vizalloc.analysis.hazards import Collector, Hazard
from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.observe import (
    ByteMapView,
    DictView,
    ListView,
    Observation,
    SetView,
)
from vizalloc.analysis.records import BindingInfo
from vizalloc.analysis.repeat import Repetition, Shift, cut_steps, repetitions
from vizalloc.analysis.state import SIZED
from vizalloc.analysis.static import BindingChecks, ReplanChecks, check_replay
from vizalloc.errors import VizallocError
from vizalloc.gcpause import gc_paused
from vizalloc.trace import events as ev
from vizalloc.trace.columns import ColumnBatch
from vizalloc.trace.schema import SCHEMA

#: Kinds a skipped step may hold: their analysis reads and writes single entries only (no
#: re-plan, reset or free that walks every placement, no list that grows per event).
REPEATABLE = frozenset(SCHEMA[c].index for c in (
    ev.ContextCreated, ev.ContextFreed, ev.TensorCreated, ev.TensorNamed, ev.TensorFlagsSet, ev.TensorSrcSet,
    ev.TensorPlaced, ev.TensorCleared, ev.GraphCreated, ev.GraphExpanded, ev.BindingBegin, ev.BindingEnd,
    ev.ComputeBegin, ev.NodeCompute, ev.ComputeEnd, ev.TensorSet, ev.TensorGet, ev.SchedSplit))

T = TypeVar("T")

#: the passes whose state a step's observation covers, by the names ``Held.ref`` uses; each
#: declares its attributes in ``STATE`` (``state.py``), and the lists below are made from those
OWNERS: dict[str, type] = {"model": TraceModel, "builder": Builder, "scan": AccessScan}
#: id kind of the keys of each observed container
_KEY_KIND = {name: held.key for cls in OWNERS.values() for name, held in cls.STATE.items()  # type: ignore[attr-defined]
             if held.viewed and held.key is not None}
#: scalars noted at the start of an observed step (``owner.name``), and the id kind of their values
_SCALARS = {f"{o}.{name}": held
            for o, cls in OWNERS.items() for name, held in cls.STATE.items()  # type: ignore[attr-defined]
            if held.how == "scalar"}
#: containers a repeated step may add to (its own objects), with what the step makes of them; and
#: the stream's own measures of that kind
_GROWING = frozenset({name for cls in OWNERS.values() for name, held in cls.STATE.items()  # type: ignore[attr-defined]
                      if held.grows} | {"buffer_placements", "replan_bindings", "checked"})
#: node tuples of scheduler splits kept to be shared (a new graph per step makes new ones: forgotten)
_SHARED_TUPLES = 256
#: steps of a repetition tried as its first two before giving up on skipping it
_ATTEMPTS = 4
#: events analysed at a time outside repetitions (made into objects, then dropped)
LITERAL_EVENTS = 1 << 16
#: events per column batch: every batch starts repetitions anew (their first steps are analysed
#: and observed), so batches are big; their columns take ~100 bytes per event while read
COLUMN_BATCH_EVENTS = 1 << 18


class RepetitionError(VizallocError):
    """A skipped repetition's last step read other state than its observed steps: the steps
    counted in between may not have found what the observed ones found. ``analysed`` then
    analyses the trace again step by step (``repeat=False``)."""


class StreamAnalysis:
    """Feed it the events of a trace in order (``feed`` events, or ``feed_columns``), then
    ``finish`` for the hazards. ``repeat=False``: analyse every step, even repeated ones."""

    def __init__(self, *, repeat: bool = True) -> None:
        self.builder = Builder([], keep_events=False)
        self.model: TraceModel = self.builder.m
        self.col = Collector()
        self.scan = AccessScan(self.model, self.col, self.builder.cpy_dst)
        self.bindings = BindingChecks(self.model, self.col)
        self.replans = ReplanChecks(self.model, self.col)
        # bindings begun and not ended (id(binding) -> its begin seq), and ended ones waiting
        # for them: the binding checks run in begin order, as find_hazards runs them
        self._unended: dict[int, int] = {}
        self._ended: list[tuple[int, int, BindingInfo]] = []
        self._checked: set[int] = set()
        self.repeat = repeat
        self.runs = runs_mod.RunTable()
        self.builder.runs = self.runs
        self.builder.hooks = self
        self.builder.watch = self.bindings.sigs.watch
        #: steps skipped (counted, not analysed) and steps analysed while observed
        self.n_skipped_steps = 0
        self._split_tuples: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.n_observed_steps = 0
        # column batches: the events carried into the next batch, and the run the carried step
        # may continue (the run, the instance number that step would be)
        self._carry: ColumnBatch | None = None
        self._carried_run: tuple[runs_mod.Run, int] | None = None
        #: told of every event analysed (in order), and of skipped steps: ``on_skipped(run, k, count)``
        #: (steps k .. k + count - 1 of the run), between the events before and after them
        self.on_events: Any = None
        self.on_skipped: Any = None

    # -- events ------------------------------------------------------------------------------
    def feed(self, events: Sequence[ev.Event]) -> None:
        """The next events of the trace."""
        self.builder.feed(list(events) if not isinstance(events, list) else events)
        self.scan.feed(events)
        if self.on_events is not None:
            self.on_events(events)

    # the builder tells these as it meets the events (``Builder.hooks``): a binding is checked
    # right at its end, with its tensors as they are then
    def replan(self, e: ev.Replan) -> None:
        self.replans.replan(e)

    def plan(self, p: Any) -> None:
        self.replans.plan(p.galloc_id)

    def binding(self, b: BindingInfo) -> None:
        self.replans.binding(b.galloc_id, b.binding_id, b.begin_seq)
        self._unended[id(b)] = b.begin_seq

    def bound(self, b: BindingInfo) -> None:
        if self._unended.pop(id(b), None) is not None:
            heapq.heappush(self._ended, (b.begin_seq, b.binding_id, b))
            self._check_ended(min(self._unended.values(), default=None))

    def changed(self, tensor_id: int) -> None:
        self.bindings.sigs.forget(tensor_id)

    def _check_ended(self, before: int | None) -> None:
        """Check the ended bindings that begun before ``before`` (None: all), in begin order."""
        ended = self._ended
        model = self.model
        while ended and (before is None or ended[0][0] < before):
            _, binding_id, b = heapq.heappop(ended)
            # a binding id used twice: find_hazards sees only the last binding of that id
            if model.bindings.get(binding_id) is b and binding_id not in self._checked:
                self._checked.add(binding_id)
                self.bindings.check(b)

    # -- columns -------------------------------------------------------------------------------
    def feed_columns(self, batch: ColumnBatch) -> None:
        """The next events of the trace, as a column batch: repeated steps are counted, not analysed.

        A step never spans two batches here: the last step of a batch (it may go on in the
        next one) is carried into the next batch; so is the last step of a repetition that
        reaches the end of the batch, which keeps that run open: when the next batch goes on
        with the same step, the run just grows.
        """
        if not self.repeat:
            self.feed(batch.events())
            return
        if self._carry is not None:
            batch = ColumnBatch.join(self._carry, batch)
            self._carry = None
        self._columns(batch, final=False)

    def _columns(self, batch: ColumnBatch, final: bool) -> None:
        steps = cut_steps(batch)
        carry_from = batch.n
        # the last step may go on in the next batch (a trailing read, the rest of a compute)
        if not final and len(steps) >= 2 and steps[-1][1] - steps[-1][0] <= batch.n // 2:
            carry_from = steps[-1][0]
            steps = steps[:-1]
        last_step = len(steps) - 1 if not final else -1
        reps = repetitions(batch, steps, min_steps=2)
        pos = 0
        if self._carried_run is not None:
            run, k = self._carried_run
            self._carried_run = None
            first = reps[0] if reps and reps[0].first == 0 else None
            if first is not None and run.moves_like(first.shift) and _same_step(run, k, batch, *steps[0]):
                pos, carry = self._grow(batch, steps, first, run, k, last_step)
                carry_from = min(carry_from, carry)
                reps = reps[1:]
            else:
                self._last_of_run(batch, steps[0], run, k)
                pos = steps[0][1]
                if reps and reps[0].first == 0:
                    reps[0] = Repetition(1, reps[0].last, reps[0].shift)
        for rep in reps:
            if rep.n_steps < 4:
                continue
            lo = steps[rep.first][0]
            if lo > pos:
                self._literal(batch, pos, lo)
            pos, carry = self._repetition(batch, steps, rep, last_step)
            carry_from = min(carry_from, carry)
        if pos < carry_from:
            self._literal(batch, pos, carry_from)
        if carry_from < batch.n:
            self._carry = batch.part(carry_from)

    def _literal(self, batch: ColumnBatch, lo: int, hi: int) -> None:
        # in pieces: a big batch of events that do not repeat must not become objects all at once
        for a in range(lo, hi, LITERAL_EVENTS):
            z = min(a + LITERAL_EVENTS, hi)
            if self.runs.runs:
                self._materialize_refs(batch, a, z)
            self.feed(batch.events(a, z))

    def _repetition(self, batch: ColumnBatch, steps: Sequence[tuple[int, int]], rep: Repetition,
                     last_step: int) -> tuple[int, int]:
        """Analyse (or skip) a repetition's steps: (the batch position after what was done, where the
        carry into the next batch starts: ``batch.n`` for none)."""
        shift = rep.shift
        lo0, hi0 = steps[rep.first]
        end = steps[rep.last][1]
        if not set(np.unique(batch.kind_of[lo0:hi0]).tolist()) <= REPEATABLE:
            self._literal(batch, lo0, end)
            return end, batch.n
        prev: tuple[Observation, dict[str, int]] | None = None
        i = rep.first
        attempts = 0
        # step i is observed; it needs a step before it observed alike, and after it at least
        # one step to skip and a last one to analyse
        while rep.last - i >= 2 and attempts < _ATTEMPTS:
            lo, hi = steps[i]
            if self._checks_waiting():  # a binding check waits: steps are not independent
                self._literal(batch, lo, hi)
                prev = None
                i += 1
                continue
            if self.runs.runs:
                self._materialize_refs(batch, lo, hi)
            seen = self._observed(batch, lo, hi)
            attempts += 1
            if seen is not None and prev is not None:
                alike = _independent(prev, seen, shift, prev[0].seqs)
                if alike is not None:
                    return self._skip(batch, steps, i, rep, seen, last_step, relative=alike)
            prev = seen
            i += 1
        self._literal(batch, steps[i][0], end)
        return end, batch.n

    def _checks_waiting(self) -> bool:
        return bool(self._unended or self._ended)

    def _observed(self, batch: ColumnBatch, lo: int, hi: int) -> tuple[Observation, dict[str, int]] | None:
        """Analyse events ``lo..hi`` while noting what they read; None when they found something
        (a step that finds a hazard is never skipped: its findings would have to be repeated)."""
        obs = Observation()
        obs.seqs = (batch.seq_at(lo), batch.seq_at(hi - 1))
        owners = self._owners()
        for key, held in _SCALARS.items():
            o, name = key.split(".")
            v = getattr(owners[o], name)
            obs.log.append(("scalar", key, getattr(v, held.ident) if held.ident and v is not None else v))
        saved = {(o, name): getattr(obj, name) for o, obj in owners.items()
                 for name, held in type(obj).STATE.items() if held.viewed}
        before = self._sizes()
        findings = self.col.n_findings

        def fast_value(t: int, v: Any) -> Any:
            return (v[0], v[1], v[2], v[3], ByteMapView(v[4], v[0], obs), v[5])

        views: dict[str, Any] = {}
        for (o, n), d in saved.items():
            how = type(owners[o]).STATE[n].how
            if how == "list":
                views[f"{o}.{n}"] = ListView(d, n, obs)
            elif how == "set":
                views[f"{o}.{n}"] = SetView(d, n, obs)
            elif how == "bytemaps":
                views[f"{o}.{n}"] = DictView(d, n, obs, lambda buf, bm: ByteMapView(bm, buf, obs))
            elif how == "fast":
                views[f"{o}.{n}"] = DictView(d, n, obs, fast_value)
            else:
                views[f"{o}.{n}"] = DictView(d, n, obs)
        # a reference to another pass' container gets that one's view (the same container)
        refs = {(o, n): views[held.same_as] for o, obj in owners.items()
                for n, held in type(obj).STATE.items() if held.how == "ref"}
        swapped = {**{(o, n): views[f"{o}.{n}"] for o, n in saved}, **refs}
        restore = {**saved, **{(o, n): getattr(owners[o], n) for o, n in refs}}
        for (o, n), v in swapped.items():
            setattr(owners[o], n, v)
        try:
            self.feed(batch.events(lo, hi))
        finally:
            for (o, n), d in restore.items():
                setattr(owners[o], n, d)
        self.n_observed_steps += 1
        if self.col.n_findings != findings:
            return None
        after = self._sizes()
        return obs, {k: after[k] - before[k] for k in after}

    def _owners(self) -> dict[str, Any]:
        return {"model": self.model, "builder": self.builder, "scan": self.scan}

    def _sizes(self) -> dict[str, int]:
        m = self.model
        out: dict[str, int] = {}
        for obj in self._owners().values():
            for n, held in type(obj).STATE.items():
                if held.how in SIZED:
                    d = getattr(obj, n)
                    out[n] = len(d) + (sum(len(x) for x in d.values()) if held.nested else 0)
        out["buffer_placements"] = sum(len(x.placements) for x in m.buffers.values())
        out["found"] = len(self.col.found) + len(self.col.predicted)
        out["replan_bindings"] = sum(e[0] for e in self.replans.bindings.values())
        out["replan_state"] = len(self.replans.planned) + len(self.replans.waiting) + len(self.replans.per_galloc)
        out["checked"] = len(self._checked)
        out["open"] = len(self._unended) + len(self._ended)
        return out

    def _skip(self, batch: ColumnBatch, steps: Sequence[tuple[int, int]], i: int, rep: Repetition,
              seen: tuple[Observation, dict[str, int]], last_step: int, *, relative: bool) -> tuple[int, int]:
        """Steps ``i - 1`` and ``i`` were analysed and read the same: count steps ``i + 1 ..
        rep.last - 1``, then analyse the last one (observed, and checked against step ``i``), or,
        when it is the batch's last step, carry it: the next batch may go on with the same step."""
        m, b, s = self.model, self.builder, self.scan
        lo, hi = steps[i]
        shift = rep.shift
        created = _created(batch, lo, hi)
        growth = seen[1]
        first_placement = len(m.placements) - growth["placements"]
        template = runs_mod.capture(created["tensor"], created["graph"], created["binding"], created["compute"],
                                    first_placement, growth["placements"], m, b, s)
        first_seq = batch.seq_at(lo)
        prev = self.runs.runs[-1] if self.runs.runs else None
        j = None if prev is None else runs_mod.continues(prev, template, shift, growth["placements"], first_seq)
        if prev is not None and j is not None:
            # the same step as an earlier run's template, moved j steps: share that template
            run = runs_mod.Run(prev.shift, prev.seq_move, prev.template, 0, hi - lo, prev.first_seq,
                               prev.placement_move, np.zeros(0, dtype=np.int64), first_k=j + 1)
            run.columns = prev.columns
        else:
            j = 0
            run = runs_mod.Run(shift, shift.seq, template, 0, hi - lo, first_seq, growth["placements"],
                               np.zeros(0, dtype=np.int64))
            run.columns = batch.part(lo, hi)
        run.observed, run.observed_at, run.relative = seen, j, relative
        run.insert_at = {"tensors": len(m.tensors), "graphs": len(m.graphs), "bindings": len(m.bindings),
                         "computes": len(m.computes)}
        for buf in run.template.by_buffer:
            run.insert_at[f"buffer{buf}"] = len(m.buffers[buf].placements)
        run.gallocs_bound = set(run.template.by_galloc)
        self.runs.add(run)
        self._count(run, batch, steps[i + 1][0], steps[rep.last][0], rep.last - i - 1)
        return self._after_skipped(batch, steps, rep, run, run.first_k + run.count, last_step)

    def _count(self, run: runs_mod.Run, batch: ColumnBatch, lo: int, hi: int, count: int) -> None:
        """Count ``count`` more steps (events ``lo..hi``) into ``run``: what they add to counters and
        to lists that only grow, their computes' times."""
        m, s = self.model, self.scan
        ce = batch.of(ev.ComputeEnd)
        a, z = np.searchsorted(ce.index, [lo, hi]).tolist()
        run.wall_ns = np.concatenate([run.wall_ns, ce.col("wall_ns")[a:z]])
        k = run.first_k + run.count
        run.count += count
        if hi > lo:
            m.streamed_last_seq = batch.seq_at(hi - 1)
        n_placements = count * run.placement_move
        m.placements.extend([None] * n_placements)  # type: ignore[list-item]  # made when read (runs.py)
        s.next_placement += n_placements
        m.n_streamed += hi - lo
        per_galloc: dict[int, int] = {}
        for bi in run.template.bindings.values():
            per_galloc[bi.galloc_id] = per_galloc.get(bi.galloc_id, 0) + 1
        for g, n in per_galloc.items():
            self.replans.bindings[g][0] += n * count
        self._count_splits(batch, lo, hi)
        self._move_scalars(run.shift, count)
        self.n_skipped_steps += count
        if self.on_skipped is not None:
            self.on_skipped(run, k, count)

    def _move_scalars(self, shift: Shift, count: int) -> None:
        """The scalars that hold ids of the steps' objects (the compute begun last) as ``count``
        more steps left them: the last step of a run starts from them, as it would have."""
        owners = self._owners()
        for key, held in _SCALARS.items():
            o, name = key.split(".")
            v = getattr(owners[o], name)
            if held.key is not None and not held.ident and type(v) is int:
                setattr(owners[o], name, shift.id(held.key, v, count))

    def _count_splits(self, batch: ColumnBatch, lo: int, hi: int) -> None:
        """The scheduler splits of skipped steps go into their scheduler's list, as the builder puts
        them (one per backend compute: a few per step); the node lists of a split that repeats
        are one tuple shared by all its repetitions."""
        splits = cast("list[ev.SchedSplit]", batch.events_of(ev.SchedSplit, lo, hi))
        if not splits:
            return
        shared = self._split_tuples
        for e in splits:
            nodes, inputs = shared.get(e.nodes), shared.get(e.inputs)
            if nodes is None:
                nodes = shared[e.nodes] = e.nodes
            if inputs is None:
                inputs = shared[e.inputs] = e.inputs
            if nodes is not e.nodes or inputs is not e.inputs:
                e = replace(e, nodes=nodes, inputs=inputs)
            self.builder.sched(e.sched_id).splits.append(e)
        if len(shared) > _SHARED_TUPLES:
            shared.clear()

    def _after_skipped(self, batch: ColumnBatch, steps: Sequence[tuple[int, int]], rep: Repetition,
                       run: runs_mod.Run, k: int, last_step: int) -> tuple[int, int]:
        """The repetition's last step (instance ``k`` of ``run``): carried when the batch ends with it,
        else analysed and checked."""
        if rep.last == last_step:
            self._carried_run = (run, k)
            return steps[rep.last][0], steps[rep.last][0]
        self._last_of_run(batch, steps[rep.last], run, k)
        return steps[rep.last][1], batch.n

    def _grow(self, batch: ColumnBatch, steps: Sequence[tuple[int, int]], rep: Repetition, run: runs_mod.Run,
              k: int, last_step: int) -> tuple[int, int]:
        """The batch goes on with the open run's step: its repetition's steps but the last are counted."""
        self._count(run, batch, steps[0][0], steps[rep.last][0], rep.last)
        return self._after_skipped(batch, steps, rep, run, k + rep.last, last_step)

    def _last_of_run(self, batch: ColumnBatch, step: tuple[int, int], run: runs_mod.Run, k: int) -> None:
        """Analyse a run's last step (instance ``k``): it must read what the run's observed step read
        (what the step before it wrote, moved, where the observed step read the step before it)."""
        before = k - 1 - run.observed_at   # steps between the observed step and the one before the last
        if run.relative and before > 0:
            self._move_writes(run, before)
        if self.runs.runs:
            self._materialize_refs(batch, *step)
        checked = self._observed(batch, *step)
        lo, hi = run.observed[0].seqs
        prev_seqs = (lo + run.seq_move * before, hi + run.seq_move * before)
        if checked is None or _independent(run.observed, checked, _times(run.shift, k - run.observed_at),
                                           prev_seqs if run.relative else None) is None:
            raise RepetitionError(
                f"the repetition that ends at seq {batch.seq_at(step[0])} did not repeat: its last step read other "
                "state than the ones before it; analyse the trace without skipping repetitions (repeat=False) "
                "and report this")

    def _move_writes(self, run: runs_mod.Run, steps: int) -> None:
        """The state the observed step wrote of objects older than the run (the access pass' last
        writes: a KV cache, the compute buffer's bytes) as the step ``steps`` later left it, which
        the run's last step reads: the writers' seqs and ids moved."""
        obs = run.observed[0]
        lo, hi = obs.seqs
        d = run.seq_move * steps
        shift = _times(run.shift, steps)
        last_write = self.scan.last_write
        for name, key in obs.writes:
            if name == "last_write":
                v = last_write.get(key)
                if v is not None and lo <= v <= hi and _older(run.shift, "tensor", key):
                    last_write[key] = v + d
        moved: dict[int, Any] = {}
        for buffer_id, ranges in obs.written_bytes.items():
            bm = self.scan.maps[buffer_id]
            # each interval is rewritten whole, as one write: the step wrote some bytes several
            # times (a small tensor, then a bigger one over it), and rewriting the pieces of each
            # write range apart cut one writer's interval in two, which the last step's reads then
            # saw as two pieces the observed step never read (llama.cpp's reused decode graph at
            # n_ubatch 96: `sa_out-17`'s 2560 bytes cut where an earlier node's 1024 ended)
            for a, z in _merged(ranges):
                for s, e, rec in bm.scan(a, z):
                    if rec is None or not lo <= rec[2] <= hi:
                        continue
                    new = moved.get(id(rec))
                    if new is None:
                        new = moved[id(rec)] = (shift.id("tensor", rec[0]), shift.id("tensor", rec[1]), rec[2] + d,
                                                _moved_event(rec[3], shift, d))
                    bm.write(s, e, new)

    def _end_columns(self) -> None:
        """No more batches: the carried events (an open run's last step, the trace's last events)."""
        carry, self._carry = self._carry, None
        if carry is not None:
            self._columns(carry, final=True)

    def _materialize_refs(self, batch: ColumnBatch, lo: int, hi: int) -> None:
        """Make live the skipped steps' objects that events ``lo..hi`` name (and what those name)."""
        wanted: dict[str, set[int]] = {"tensor": set(), "graph": set(), "binding": set(), "compute": set()}
        for kc in batch.by_kind.values():
            a, z = np.searchsorted(kc.index, [lo, hi]).tolist()
            if a == z:
                continue
            for fname in kc.plan.schema.fields:
                kind = ev.ID_FIELDS.get(fname)
                if kind not in wanted:
                    continue
                items = kc.items.get(fname)
                if items is not None:
                    starts, values = items
                    vals = values[int(starts[a]):int(starts[z])]
                else:
                    vals = kc.cols[fname][a:z]
                if len(vals):
                    wanted[kind].update(self.runs.candidates(kind, np.unique(vals)))
        todo = [(k, v) for k, vs in wanted.items() for v in vs]
        if not todo:
            return
        done: set[tuple[str, int]] = set()
        while todo:
            kind, v = todo.pop()
            if (kind, v) in done or v < 0:
                continue
            done.add((kind, v))
            rec = runs_mod.materialize(self.runs, kind, v, self.model, self.builder, self.scan)
            if rec is None:
                continue
            if kind == "tensor":
                todo += [("tensor", x) for x in (*rec.srcs, rec.view_src, rec.copy_of)]
            elif kind in ("graph", "binding", "compute"):
                g = rec if kind == "graph" else rec.graph
                if g is not None:
                    todo += [("tensor", x) for x in (*g.nodes, *g.leafs)]
                if kind in ("binding", "compute"):
                    todo.append(("graph", rec.graph_id))

    # -- the end -------------------------------------------------------------------------------
    def finish(self) -> list[Hazard]:
        """The hazards, sorted as ``find_hazards`` sorts them; the model shows skipped steps' objects."""
        self._end_columns()
        self._unended.clear()
        self._check_ended(None)
        self.scan.finish()
        self.replans.finish()
        check_replay(self.model, self.col)
        hazards = self.col.hazards()
        hazards.sort(key=Hazard.sort_key)
        if self.runs.runs:
            self._show_runs()
        return hazards

    def _show_runs(self) -> None:
        m = self.model
        runs = self.runs.runs
        m.tensors = runs_mod.VirtualMap(m.tensors, runs, "tensor", "tensors")  # type: ignore[assignment]
        m.graphs = runs_mod.VirtualMap(m.graphs, runs, "graph", "graphs")  # type: ignore[assignment]
        m.bindings = runs_mod.VirtualMap(m.bindings, runs, "binding", "bindings")  # type: ignore[assignment]
        m.computes = runs_mod.VirtualMap(m.computes, runs, "compute", "computes")  # type: ignore[assignment]
        m.placements = runs_mod.VirtualList(m.placements, self.runs)  # type: ignore[assignment]
        for buf_id, buf in m.buffers.items():
            extra = [(run.insert_at[f"buffer{buf_id}"], run, run.template.by_buffer[buf_id]) for run in runs
                     if buf_id in run.template.by_buffer]
            if extra:
                buf.placements = runs_mod.VirtualIds(buf.placements, extra)  # type: ignore[assignment]


def _created(batch: ColumnBatch, lo: int, hi: int) -> dict[str, list[int]]:
    """Ids of the objects events ``lo..hi`` create, by kind, in order."""
    out: dict[str, list[int]] = {}
    for kind, cls, fname in (("tensor", ev.TensorCreated, "tensor_id"), ("graph", ev.GraphCreated, "graph_id"),
                             ("binding", ev.BindingBegin, "binding_id"), ("compute", ev.ComputeBegin, "compute_id")):
        kc = batch.of(cls)
        a, z = np.searchsorted(kc.index, [lo, hi]).tolist()
        out[kind] = list(dict.fromkeys(kc.col(fname)[a:z].tolist()))
    return out


def _same_step(run: runs_mod.Run, k: int, batch: ColumnBatch, lo: int, hi: int) -> bool:
    """Whether events ``lo..hi`` are the run's template step moved ``k`` steps (ids, seq; times aside)."""
    t = run.columns
    if hi - lo != t.n or not np.array_equal(batch.kind_of[lo:hi], t.kind_of):
        return False
    part = batch.part(lo, hi)
    for cls, tk in t.by_kind.items():
        pk = part.by_kind.get(cls)
        if pk is None or not np.array_equal(pk.seq, tk.seq + run.seq_move * k):
            return False
        name = cls.__name__
        for field in tk.plan.schema.fields:
            if (name, field) in ev.TIME_FIELDS:
                continue
            kind = ev.ID_FIELDS.get(field)
            pairs: list[tuple[np.ndarray, np.ndarray, str | None]]
            if field in tk.items:   # the counts are plain values, the items ids or values
                pairs = [(tk.cols[field], pk.cols[field], None), (tk.items[field][1], pk.items[field][1], kind)]
            else:
                pairs = [(tk.cols[field], pk.cols[field], kind)]
            for tv, pv, kd in pairs:
                if len(tv) != len(pv):
                    return False
                rule = run.shift.ids.get(kd) if kd is not None else None
                expected = tv if rule is None else np.where(tv >= rule[0], tv + rule[1] * k, tv)
                if not np.array_equal(expected, pv):
                    return False
    return True


def _times(shift: Shift, k: int) -> Shift:
    return Shift({kind: (lo, move * k) for kind, (lo, move) in shift.ids.items()}, shift.seq * k)


def _independent(first: tuple[Observation, dict[str, int]], second: tuple[Observation, dict[str, int]],
                 shift: Shift, prev_seqs: tuple[int, int] | None) -> bool | None:
    """Whether the second step read what the first read (keys of the second step's own objects
    moved back by ``shift``) and grew the same containers alike: None when not; True when some
    reads were of what the step right before the second wrote (seqs ``prev_seqs``; None: none
    may be), at the place where the first step read the step before it (its last-writer seq
    moved by ``shift``): a same-graph decode loop's KV cache, written at one token and read at
    the next. Such a step may write entries of older objects only in the access pass' last
    writes (``_move_writes`` moves those for the run's last step); False when none were."""
    (obs1, grew1), (obs2, grew2) = first, second
    if grew1 != grew2:
        return None
    if any(n not in _GROWING for n, d in grew2.items() if d):
        return None
    seen: dict[tuple[str, Any], set[Any]] = {}
    for name, key, value in obs1.log:
        seen.setdefault((name, key), set()).add(value)
    relative = False
    for name, key, value in obs2.log:
        kind = _KEY_KIND.get(name)
        if kind is not None and isinstance(key, int):
            rule = shift.ids.get(kind)
            if rule is not None and key - rule[1] >= rule[0]:
                key = key - rule[1]
        values = seen.get((name, key))
        if values is None:
            return None
        if value in values:
            continue
        if name == "scalar":   # an id the step before left: one step's move on
            rule = shift.ids.get(_SCALARS[key].key or "")
            if rule is not None and isinstance(value, int) and value >= rule[0] and value - rule[1] in values:
                continue
            return None
        if prev_seqs is None:
            return None
        if name == "last_write" and isinstance(value, int):
            if not prev_seqs[0] <= value <= prev_seqs[1] or value - shift.seq not in values:
                return None
        elif name == "bytes" and isinstance(value, tuple):
            wkey, writer, wseq = value
            back = (shift.id("tensor", wkey, -1), shift.id("tensor", writer, -1), wseq - shift.seq)
            if not prev_seqs[0] <= wseq <= prev_seqs[1] or back not in values:
                return None
        else:
            return None
        relative = True
    if relative and any(name != "last_write" and not _own(shift, name, key) for name, key in obs2.writes):
        return None
    return relative


def _own(shift: Shift, name: str, key: Any) -> bool:
    """Whether ``key`` of container ``name`` is an object the step made (its id moves step by step)."""
    kind = _KEY_KIND.get(name)
    return kind is not None and isinstance(key, int) and not _older(shift, kind, key)


def _older(shift: Shift, kind: str, key: int) -> bool:
    """Whether id ``key`` of ``kind`` stays from step to step (an object older than the run)."""
    rule = shift.ids.get(kind)
    return rule is None or key < rule[0]


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges as their union: sorted, disjoint, touching ones joined.

    >>> _merged([(4, 8), (0, 2), (2, 3), (6, 10)])
    [(0, 3), (4, 10)]
    """
    out: list[tuple[int, int]] = []
    for a, z in sorted(ranges):
        if out and a <= out[-1][1]:
            if z > out[-1][1]:
                out[-1] = (out[-1][0], z)
        else:
            out.append((a, z))
    return out


def _moved_event(e: ev.Event, shift: Shift, d: int) -> ev.Event:
    """Writer event ``e`` as the same event ``shift`` later (``seq`` moved by ``d``; its times stay:
    reports name a writer by seq, node and compute, never by time)."""
    changes: dict[str, Any] = {"seq": e.seq + d}
    for f in ev.payload_fields(type(e)):
        kind = ev.ID_FIELDS.get(f)
        if kind is None:
            continue
        v = getattr(e, f)
        changes[f] = tuple(shift.id(kind, x) for x in v) if isinstance(v, tuple) else shift.id(kind, v)
    return replace(e, **changes)


def analysed(run: Callable[[StreamAnalysis], T], *, repeat: bool = True) -> T:
    """``run(stream)`` feeds a new stream the whole trace and finishes it; what it returns. When
    the proof of a skipped repetition fails (``RepetitionError``: its last step read other state
    than the steps observed before it), the steps it counted were never analysed and the state
    the stream holds is not the trace's: the trace is read and analysed again, every step one by
    one (``repeat=False``), so the result is exactly that of ``repeat=False``.

    ``run`` must read the trace anew each time it is called (reopen the file)."""
    if repeat:
        try:
            return run(StreamAnalysis(repeat=True))
        except RepetitionError:
            pass
    return run(StreamAnalysis(repeat=False))


def analyse_events(batches: Iterable[Sequence[ev.Event]]) -> tuple[TraceModel, list[Hazard]]:
    """The model (keeping no events) and the hazards of a trace given as batches of events."""
    stream = StreamAnalysis()
    with gc_paused():
        for events in batches:
            stream.feed(events)
        return stream.model, stream.finish()


def analyse_columns(batches: Iterable[ColumnBatch] | Callable[[], Iterable[ColumnBatch]], *,
                    repeat: bool = True) -> tuple[TraceModel, list[Hazard]]:
    """The same from column batches, repeated steps skipped (``repeat=False``: analysed). Given a
    function that reads the batches (anew each call), a failed proof of repetition is followed by
    an analysis of every step (``analysed``); given the batches themselves, it raises
    ``RepetitionError`` (they cannot be read again)."""

    def run(stream: StreamAnalysis) -> tuple[TraceModel, list[Hazard]]:
        with gc_paused():
            for batch in (batches() if callable(batches) else batches):
                stream.feed_columns(batch)
            return stream.model, stream.finish()

    if callable(batches):
        return analysed(run, repeat=repeat)
    return run(StreamAnalysis(repeat=repeat))
