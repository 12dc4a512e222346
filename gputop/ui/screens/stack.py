"""A call site's whole stack (Enter on the details screen's call-sites panel), as it was when opened."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.model import CallSite
from gputop.ui import bindings
from gputop.view import format as fmt
from gputop.view import sites

_MUTED = "$foreground 60%"


def stack_content(site: CallSite, who: str = "", width: int = 1000) -> Content:
    """The site (``who``: whose, ``PID 4242``), its estimate, share, samples and top kernel, then its most
    sampled stack (innermost frame first), each frame cut to ``width`` in the middle (its line stays)."""
    where = f" of {who}" if who else ""
    kind = "native callers (the thread ran no Python), " if site.kind == "native" else ""
    lines = [
        Content.styled(f"call site{where}: {sites.site_label(site)}", "bold reverse $primary"),
        Content(""),
        Content.assemble(("launches/s (est.)  ", "bold"),
                         sites.estimate(site.launches_per_s, site.launches_per_s_error), "  (±: 95 % interval)"),
        Content.assemble(("share              ", "bold"), sites.share(site), " of the samples since first seen"),
        Content.assemble(("samples            ", "bold"),
                         f"{site.samples:,} this interval, {site.total_samples:,} in all"),
        Content.assemble(("top kernel         ", "bold"), fmt.text(site.top_kernel)),
        Content.assemble(("stack              ", "bold"), f"{kind}innermost first: the site's most sampled"),
        Content(""),
    ]
    frames = sites.stack_lines(site)
    lines += [Content(fmt.fit_middle(line, width)) for line in frames] or [Content.styled("no frame read", _MUTED)]
    lines += [Content(""), Content.styled("Esc: close", _MUTED)]
    return Content("\n").join(lines)


class StackScreen(ModalScreen[None]):
    BINDINGS = bindings.of(bindings.STACK)
    DEFAULT_CSS = """
    StackScreen { align: center middle; }
    StackScreen > VerticalScroll { max-width: 100%; height: auto; max-height: 90%; border: round $primary;
                                   background: $surface; padding: 0 1; }
    StackScreen #stack-text { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, site: CallSite, who: str = "") -> None:
        super().__init__()
        self.site = site
        self.who = who

    def compose(self) -> ComposeResult:
        # frames cut in the middle to the screen (border, padding, scrollbar): their line numbers stay
        content = stack_content(self.site, self.who, max(20, self.app.size.width - 6))
        box = VerticalScroll()
        # as wide as its longest line (+ border, padding and the scrollbar), at least 60; the screen caps it
        box.styles.width = max(60, max(line.cell_length for line in content.split("\n")) + 6)
        with box:
            yield Static(content, id="stack-text")

    def action_close(self) -> None:
        self.dismiss()
