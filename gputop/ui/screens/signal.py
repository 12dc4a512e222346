"""The signal dialog of `k`: which signal, to which processes; nothing is sent without Enter."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Optional

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gputop.ui import bindings

#: offered in this order; the first is highlighted
SIGNALS: tuple[tuple[int, str], ...] = (
    (signal.SIGTERM, "terminate (ask politely)"),
    (signal.SIGINT, "interrupt (like ^C)"),
    (signal.SIGKILL, "kill (cannot be caught)"),
    (signal.SIGHUP, "hang up"),
    (signal.SIGQUIT, "quit with core dump"),
    (signal.SIGSTOP, "stop (pause the process)"),
    (signal.SIGCONT, "continue a stopped process"),
    (signal.SIGUSR1, "user signal 1"),
    (signal.SIGUSR2, "user signal 2"),
)


class SignalScreen(ModalScreen[Optional[int]]):
    """Returns the chosen signal number, or None when cancelled."""

    BINDINGS = bindings.of(bindings.SIGNAL)
    DEFAULT_CSS = """
    SignalScreen { align: center middle; }
    SignalScreen > Vertical {
        width: 72; max-width: 100%; height: auto; max-height: 100%; border: thick $error;
        background: $surface; padding: 0 1;
    }
    SignalScreen OptionList { height: auto; border: none; background: $surface; }
    SignalScreen #signal-title { text-style: bold; color: $error; }
    SignalScreen Static { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, targets: Sequence[str]) -> None:
        super().__init__()
        self.targets = list(targets)

    def compose(self) -> ComposeResult:
        who = self.targets[0] if len(self.targets) == 1 else f"{len(self.targets)} tagged processes"
        title = f"Send a signal to {who}?"
        box = Vertical()
        # as wide as the longest line (the commands named), at least 72; the screen's width caps it and a
        # line too long for that ends in an ellipsis
        longest = max(len(title), *(len(t) for t in self.targets)) if len(self.targets) > 1 else len(title)
        box.styles.width = max(72, longest + 4)     # + border and padding
        with box:
            yield Static(title, id="signal-title", markup=False)
            if len(self.targets) > 1:
                yield Static("\n".join(self.targets), markup=False)
            yield OptionList(
                *[
                    Option(
                        Content.assemble((f"{signal.Signals(n).name:<8}", "bold"), f" {n:>2}  {desc}"),
                        id=str(int(n)),
                    )
                    for n, desc in SIGNALS
                ]
            )
            yield Static("Enter: send   Esc: cancel", markup=False)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(str(event.option.id)))

    def action_send(self) -> None:
        ol = self.query_one(OptionList)
        self.dismiss(SIGNALS[ol.highlighted or 0][0])

    def action_cancel(self) -> None:
        self.dismiss(None)
