"""The message line: what ``GputopApp.say`` tells the user, on a line of its own at the bottom of the
screen (above the footer), never over the data.

Textual's notifications draw toasts over the table (the hidden toast rack still records them); this line
takes a row from the layout while a message shows, and gives it back when the message times out.
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
        dock: bottom; height: 1; width: 100%; padding: 0 1; background: $panel;
        text-wrap: nowrap; text-overflow: ellipsis; display: none;
    }
    MessageLine.-shown { display: block; }
    MessageLine.-above-footer { margin-bottom: 1; }
    """

    def __init__(self) -> None:
        super().__init__("", markup=False)
        self.text = ""
        self._serial = 0

    def say(self, text: str, severity: str, timeout: float) -> None:
        """Show ``text`` (already sanitised) until ``timeout`` seconds pass or another message replaces it."""
        self._serial += 1
        serial = self._serial
        self.text = PREFIX.get(severity, "") + text
        self.update(Content.styled(self.text, STYLES.get(severity, "$text")))
        self.add_class("-shown")
        self.set_timer(timeout, lambda: self._expire(serial))

    def _expire(self, serial: int) -> None:
        if serial == self._serial:
            self.text = ""
            self.update("")
            self.remove_class("-shown")


def line_of(screen: Screen[object]) -> MessageLine:
    """The screen's message line, mounted on first use (above the screen's footer, if it has one)."""
    for line in screen.query_children(MessageLine):
        return line
    line = MessageLine()
    footers = list(screen.query_children(Footer))
    line.set_class(bool(footers), "-above-footer")
    screen.mount(line, before=footers[0] if footers else None)
    return line
