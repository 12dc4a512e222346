"""The sort menu (`s`): pick the sort column; `x` shows or hides a column. What `x` does shows at once
behind the menu; `Enter` keeps it (and saves it), `Esc` puts the columns back as they were when the menu
opened, nothing saved (issue 35: a column hidden and then cancelled stayed hidden, and saved)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from gputop.ui import bindings
from gputop.view.columns import COLUMNS, FLEET_ONLY, Column

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp


class SortScreen(ModalScreen[None]):
    BINDINGS = bindings.of(bindings.SORT_MENU)
    DEFAULT_CSS = """
    SortScreen { align: center middle; }
    SortScreen > Vertical { max-width: 100%; height: auto; max-height: 90%; border: round $primary;
                            background: $surface; padding: 0 1; }
    SortScreen OptionList { height: auto; max-height: 28; border: none; background: $surface;
                           text-wrap: nowrap; text-overflow: ellipsis; }
    SortScreen #sort-title { text-style: bold; color: $primary; }
    """

    def __init__(self) -> None:
        super().__init__()
        #: the columns when the menu opened: what Esc puts back
        self._opened: tuple[str, ...] = ()

    @property
    def gapp(self) -> GputopApp:
        return cast("GputopApp", self.app)

    @property
    def columns(self) -> list[Column]:
        """The table's columns: NODE only in the fleet view (where it always shows)."""
        fleet = self.gapp.is_fleet
        return [c for c in COLUMNS if fleet or c.key not in FLEET_ONLY]

    def _label(self, i: int) -> Content:
        col = self.columns[i]
        s = self.gapp.settings
        shown = "✓" if col.key in s.columns or col.key in FLEET_ONLY else " "
        arrow = ""
        if col.key == s.sort:
            arrow = " ▼" if col.descending != s.reverse else " ▲"
        head_w = max(len(c.header) for c in self.columns) + 3     # the arrow and a space
        key_w = max(len(c.key) for c in self.columns) + 2
        return Content.assemble(
            f"[{shown}] ", (f"{col.header}{arrow}".ljust(head_w), "bold"), (col.key.ljust(key_w), "$accent"), col.help
        )

    def compose(self) -> ComposeResult:
        # one line at 80 columns; Enter keeps what x did, Esc undoes it
        title = "Sort by — x: show/hide column  Enter: sort by it and keep  Esc: cancel"
        labels = [self._label(i) for i in range(len(self.columns))]
        box = Vertical()
        # as wide as its longest row (+ border, padding, the option list's padding and scrollbar), so
        # that no description is cut where the screen has room; max-width: 100% caps it, and a row too
        # long for the screen ends in an ellipsis
        box.styles.width = max(len(title), *(label.cell_length + 2 for label in labels)) + 6
        with box:
            yield Static(title, id="sort-title")
            yield OptionList(*[Option(label, id=c.key) for label, c in zip(labels, self.columns)])
        yield Footer()

    def on_mount(self) -> None:
        self._opened = tuple(self.gapp.settings.columns)
        keys = [c.key for c in self.columns]
        self.query_one(OptionList).highlighted = keys.index(self.gapp.settings.sort)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self._keep(str(event.option.id))

    def action_choose(self) -> None:
        ol = self.query_one(OptionList)
        self._keep(self.columns[ol.highlighted].key if ol.highlighted is not None else None)

    def _keep(self, key: str | None) -> None:
        """Enter: keep the columns as shown now (saved when they changed) and sort by ``key``; a column
        hidden in the menu and then chosen is shown again (the sort column always shows)."""
        app = self.gapp
        current = list(app.settings.columns)
        if key is not None and key not in current and key not in FLEET_ONLY:
            current = [k for k in (c.key for c in COLUMNS) if k in current or k == key]
        if tuple(current) != tuple(app.settings.columns) or tuple(current) != self._opened:
            app.set_columns(current, save=tuple(current) != self._opened)
        if key is not None:
            app.set_sort(key, reverse=False)
        self.dismiss()

    def action_toggle_column(self) -> None:
        ol = self.query_one(OptionList)
        i = ol.highlighted
        if i is None:
            return
        key = self.columns[i].key
        current = list(self.gapp.settings.columns)
        if key in FLEET_ONLY:
            what = self.columns[i].header
            self.gapp.say(f"{what} is shown in the fleet view only, and there always"
                          + (" (while some process has a pod)" if key != "node" else ""), "warning")
            return
        if key in current:
            if key == "pid":
                self.gapp.say("PID is always shown", "warning")
                return
            if key == self.gapp.settings.sort:
                self.gapp.say("the list is sorted by this column: sort by another one first", "warning")
                return
            current.remove(key)
        else:
            order = [c.key for c in COLUMNS]
            current = [k for k in order if k in current or k == key]
        self.gapp.set_columns(current, save=False)      # shown at once; saved on Enter, undone by Esc
        ol.replace_option_prompt_at_index(i, self._label(i))

    def action_cancel(self) -> None:
        """Esc: the columns as they were when the menu opened, nothing saved."""
        if tuple(self.gapp.settings.columns) != self._opened:
            self.gapp.set_columns(self._opened, save=False)
        self.dismiss()
