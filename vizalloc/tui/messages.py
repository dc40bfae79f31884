"""Messages the app's workers post to it (thread-safe ``post_message``): the loading worker's,
and the one that prepares a binding's views."""

from __future__ import annotations

from textual.message import Message

from vizalloc.tui.data import Analysis


class LoadProgress(Message):
    """More of the trace was read or analysed: ``phase`` at ``done`` of ``total``."""

    def __init__(self, phase: str, done: int, total: int) -> None:
        super().__init__()
        self.phase = phase
        self.done = done
        self.total = total


class TraceAnalysed(Message):
    """The model, hazards and tensor rows are ready."""

    def __init__(self, analysis: Analysis) -> None:
        super().__init__()
        self.analysis = analysis


class LoadFailed(Message):
    """Reading or analysing the trace failed; ``text`` says why (already inert)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class BindingPrepared(Message):
    """The panes' views of a binding were computed in a worker (``PaneScreen.prepare``)."""

    def __init__(self, binding_id: int) -> None:
        super().__init__()
        self.binding_id = binding_id
