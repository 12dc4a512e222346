"""The message line: what ``GputopApp.say`` tells the user, on a line of its own at the bottom of the
screen (above the footer), never over the data.

Textual's notifications would draw toasts over the table (the app composes no toast rack; notifications
still record them); this line takes a row from the layout for each message shown (up to three: startup
notices come together), and gives it back when the message times out.
"""

from __future__ import annotations

from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

#: the style of each severity (Textual's notification levels)
STYLES = {"information": "$text", "warning": "$warning bold", "error": "$error bold"}
#: what a message of each severity starts with (severity without colour: NO_COLOR, monochrome)
PREFIX = {"information": "", "warning": "warning: ", "error": "error: "}


class MessageLine(Static):
    DEFAULT_CSS = """
    MessageLine {
        dock: bottom; height: auto; max-height: 3; width: 100%; padding: 0 1; background: $panel;
        text-wrap: nowrap; text-overflow: ellipsis; display: none;
    }
    MessageLine.-shown { display: block; }
    MessageLine.-above-footer { margin-bottom: 1; }
    """

    #: messages shown at once, one a line (the newest last); an older one gives way to a newer
    MAX_SHOWN = 3

    def __init__(self) -> None:
        super().__init__("", markup=False)
        self.text = ""
        self._serial = 0
        self._shown: list[tuple[int, str, str]] = []        # (serial, severity, text with its prefix)

    def say(self, text: str, severity: str, timeout: float) -> None:
        """Show ``text`` (already sanitised) for ``timeout`` seconds, below the messages still shown (at
        most MAX_SHOWN: the oldest gives way)."""
        self._serial += 1
        serial = self._serial
        self._shown = [*self._shown, (serial, severity, PREFIX.get(severity, "") + text)][-self.MAX_SHOWN:]
        self._render_shown()
        self.set_timer(timeout, lambda: self._expire(serial))

    def _render_shown(self) -> None:
        self.text = "\n".join(t for _, _, t in self._shown)
        self.update(Content("\n").join(Content.styled(t, STYLES.get(sev, "$text")) for _, sev, t in self._shown))
        self.set_class(bool(self._shown), "-shown")

    def _expire(self, serial: int) -> None:
        if any(s == serial for s, _, _ in self._shown):
            self._shown = [m for m in self._shown if m[0] != serial]
            self._render_shown()


def line_of(screen: Screen[object]) -> MessageLine:
    """The screen's message line, mounted on first use (above the screen's footer, if it has one)."""
    for line in screen.query_children(MessageLine):
        return line
    line = MessageLine()
    footers = list(screen.query_children(Footer))
    line.set_class(bool(footers), "-above-footer")
    screen.mount(line, before=footers[0] if footers else None)
    return line
