"""The help screen (`h`/`?`), generated from gputop.ui.bindings and the column list."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.ui import bindings
from gputop.view.columns import COLUMNS, FLEET_ONLY

#: the help's lines on how numbers read (docs/dashboard.md, Number style)
#: (each fits the help at 80 columns)
NUMBER_STYLE = (
    "three significant digits: 953, 1.00k, 12.3k, 123k",
    "whole numbers below 1000 without decimals: 80, not 80.0",
    "counts and rates: k M G = 10^3 10^6 10^9",
    "bytes (H2D/s, LIVE MEM, GPU MEM, RSS): K M G T = KiB MiB GiB TiB",
    "the next unit from one of it: 999k then 1.00M, 1023M then 1.00G",
)


#: keys by the names the footer, the summary line, the README and docs use
KEY_NAMES = {"space": "Space", "escape": "Esc", "enter": "Enter", "ctrl+c": "Ctrl+C", "backslash": "\\",
             **{f"f{n}": f"F{n}" for n in range(1, 13)},
             "pageup": "PgUp", "pagedown": "PgDn", "home": "Home", "end": "End", "tab": "Tab",
             "backspace": "⌫"}


def key_names(app: App[object], b: Binding) -> str:
    """Every key of a binding, as shown to the user ("Esc/q/⌫")."""
    names = [KEY_NAMES.get(k) or app.get_key_display(Binding(k, b.action)) for k in b.key.split(",")]
    return (" " if "/" in names else "/").join(names)         # "/ F4 \\", not "//F4/\\"


def help_content(app: App[object], fleet: bool = False) -> Content:
    """The help text; ``fleet``: with the fleet view's columns."""
    lines: list[Content] = [
        Content.styled("gputop — keys (Esc closes)", "bold reverse $primary"),
        Content(""),
    ]
    keys_w = max(len(key_names(app, b)) for _, group in bindings.SECTIONS for b in group) + 2
    for title, group in bindings.SECTIONS:
        lines.append(Content.styled(title, "bold $primary underline"))
        for b in group:
            lines.append(
                Content.assemble((f"  {key_names(app, b).ljust(keys_w)}", "bold $accent"), b.tooltip or b.description)
            )
        lines.append(Content(""))
    lines.append(Content.styled("Columns (sort keys for -s/--sort)", "bold $primary underline"))
    cols = [c for c in COLUMNS if c.key not in FLEET_ONLY or fleet]
    head_w = max(len(c.header) for c in cols) + 2
    key_w = max(len(c.key) for c in cols) + 2
    for c in cols:
        lines.append(Content.assemble((f"  {c.header.ljust(head_w)}", "bold"), (c.key.ljust(key_w), "$accent"), c.help))
    lines.append(Content(""))
    lines.append(Content.styled("Numbers", "bold $primary underline"))
    for text in NUMBER_STYLE:
        lines.append(Content(f"  {text}"))
    lines.append(
        Content.styled("N/A: the value is unknown to gputop (a source is unavailable), not zero.", "italic")
    )
    return Content("\n").join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS = bindings.of(bindings.HELP)
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { max-width: 100%; height: 90%; border: round $primary;
                                  background: $surface;
                                  padding: 0 1; }
    HelpScreen #help-text { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, fleet: bool = False) -> None:
        super().__init__()
        #: show the fleet view's columns too
        self.fleet = fleet

    def compose(self) -> ComposeResult:
        content = help_content(self.app, self.fleet)
        box = VerticalScroll()
        # as wide as its longest line (+ border, padding and the scrollbar): nothing is cut where the
        # screen has room; max-width: 100% caps it, and a line too long for the screen ends in an ellipsis
        box.styles.width = max(line.cell_length for line in content.split("\n")) + 6
        with box:
            yield Static(content, id="help-text")

    def action_close(self) -> None:
        self.dismiss()
