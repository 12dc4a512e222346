"""The help screen (`h`/`?`), generated from gputop.ui.bindings and the column list."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.ui import bindings
from gputop.ui.columns import COLUMNS, FLEET_ONLY


def key_names(app: App[object], b: Binding) -> str:
    """Every key of a binding, as shown to the user ("esc/q/⌫")."""
    return "/".join(app.get_key_display(Binding(k, b.action)) for k in b.key.split(","))


def help_content(app: App[object]) -> Content:
    lines: list[Content] = [
        Content.styled("gputop — keys (Esc closes)", "bold reverse $primary"),
        Content(""),
    ]
    for title, group in bindings.SECTIONS:
        lines.append(Content.styled(title, "bold $primary underline"))
        for b in group:
            lines.append(
                Content.assemble((f"  {key_names(app, b):<12}", "bold $accent"), b.tooltip or b.description)
            )
        lines.append(Content(""))
    lines.append(Content.styled("Columns (sort keys for -s/--sort)", "bold $primary underline"))
    for c in COLUMNS:
        if c.key in FLEET_ONLY and getattr(app, "is_fleet", False) is not True:
            continue
        lines.append(Content.assemble((f"  {c.header:<9}", "bold"), (f"{c.key:<13}", "$accent"), c.help))
    lines.append(Content(""))
    lines.append(
        Content.styled("N/A: the value is unknown to gputop (a source is unavailable), not zero.", "italic")
    )
    return Content("\n").join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS = bindings.of(bindings.HELP)
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 100; max-width: 100%; height: 90%; border: round $primary;
                                  background: $surface;
                                  padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_content(self.app), id="help-text")

    def action_close(self) -> None:
        self.dismiss()
