"""The footer: the active screen's shown bindings on one line, clickable.

Textual's ``Footer`` builds one widget per key and restyles them all whenever the
bindings change, which was most of the cost of switching panes (``benchmarks/tui.py``
measures a switch). This bar draws the same
``Binding`` objects (only those with ``show=True``) as one ``Text``; a click on a key
presses it.

    yield KeysBar()
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.screen import Screen
from textual.widget import Widget


class KeysBar(Widget):
    """One line of ``key description`` pairs for the screen's active bindings."""

    DEFAULT_CSS = """
    KeysBar { height: 1; dock: bottom; background: $panel; }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._spans: list[tuple[int, int, str]] = []  # (start, end, key) of each shown binding

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if self.is_attached and screen is self.screen:
            self.refresh()

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        self._spans = []
        seen: set[str] = set()
        items: list[tuple[str, str, bool, str]] = []   # (key shown, description, enabled, key pressed)
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            items.append((self.app.get_key_display(binding), binding.description, enabled,
                          binding.key.split(",")[0]))
        for key, description, enabled, press in fit_keys(items, self.size.width):
            start = len(text)
            text.append(f" {key} ", style="bold reverse" if enabled else "dim reverse")
            text.append(f" {description} ", style="" if enabled else "dim")
            self._spans.append((start, len(text), press))
        return text

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return


#: Keys kept on a narrow bar whatever else has to go: the one that lists every key.
ALWAYS_SHOWN = frozenset({"question_mark"})


def fit_keys(items: list[tuple[str, str, bool, str]], width: int) -> list[tuple[str, str, bool, str]]:
    """The items ``(key, description, enabled, pressed)`` that fit in ``width`` cells, in order:
    when not all fit, the later ones go first, but never Help (``?`` lists every key).

        >>> items = [("n", "Next", True, "n"), ("p", "Prev", True, "p"), ("?", "Help", True, "question_mark")]
        >>> [i[1] for i in fit_keys(items, 80)], [i[1] for i in fit_keys(items, 20)]
        (['Next', 'Prev', 'Help'], ['Next', 'Help'])
    """
    def cells(item: tuple[str, str, bool, str]) -> int:
        return len(item[0]) + len(item[1]) + 4

    if width <= 0 or sum(map(cells, items)) <= width:
        return items
    room = width - sum(cells(i) for i in items if i[3] in ALWAYS_SHOWN)
    keep: set[int] = set()
    for k, item in enumerate(items):
        if item[3] in ALWAYS_SHOWN:
            keep.add(k)
        elif cells(item) <= room:
            keep.add(k)
            room -= cells(item)
        else:
            room = -1   # keep the order: nothing after the first that does not fit
    return [item for k, item in enumerate(items) if k in keep]
