"""Every key binding of the dashboard, in one place. The help screen is generated from these.

``description`` is the footer's short label; ``tooltip`` the help screen's sentence.
"""

from __future__ import annotations

from textual.binding import Binding, BindingType


def of(group: list[Binding]) -> list[BindingType]:
    """A group as the BINDINGS of a Textual class."""
    return [*group]


#: anywhere in the app (the App's BINDINGS)
GLOBAL: list[Binding] = [
    Binding("q", "quit", "Quit", tooltip="quit gputop (on a details, compare or help screen: go back)"),
    Binding("ctrl+c,f10", "quit", "Quit", show=False, priority=True, tooltip="quit gputop from anywhere (F10: htop's)"),
    Binding("h,question_mark,f1", "help", "Help", key_display="?", tooltip="show this help"),
    Binding("p", "pause", "Pause", tooltip="pause or resume refreshing (the collector keeps counting)"),
    Binding(
        "plus,equals_sign",
        "interval(1)",
        "Slower",
        key_display="+",
        show=False,
        tooltip="longer refresh interval (replay: longer step)",
    ),
    Binding(
        "minus",
        "interval(-1)",
        "Faster",
        key_display="-",
        show=False,
        tooltip="shorter refresh interval (replay: shorter step)",
    ),
    Binding("t", "cycle_theme", "Theme", tooltip="next colour theme (saved in config.toml)"),
]

#: the footer shows "., Step" for both step keys (one entry: the footer fits 80 columns)
_STEP = Binding.Group("Step", compact=True)

#: replay only (hidden otherwise)
REPLAY: list[Binding] = [
    Binding(
        "full_stop", "step(1)", "Step", key_display=".", tooltip="replay: pause and show the next snapshot",
        group=_STEP,
    ),
    Binding(
        "comma", "step(-1)", "Back", key_display=",", tooltip="replay: pause and show the previous snapshot",
        group=_STEP,
    ),
    Binding(
        "right_square_bracket",
        "speed(2)",
        "Speed×2",
        key_display="]",
        show=False,
        tooltip="replay: play twice as fast",
    ),
    Binding(
        "left_square_bracket",
        "speed(0.5)",
        "Speed÷2",
        key_display="[",
        show=False,
        tooltip="replay: play half as fast",
    ),
]

#: live mode: the replay keys say what they are for instead of doing nothing (hidden)
REPLAY_ONLY: list[Binding] = [
    Binding(
        "full_stop,comma,left_square_bracket,right_square_bracket",
        "replay_only",
        "Replay keys",
        show=False,
        tooltip="live: say that . , [ ] step and pace a replay (--replay FILE)",
    ),
]

#: the main screen
MAIN: list[Binding] = [
    Binding(
        "slash,f4,backslash",
        "filter",
        "Filter",
        key_display="/",
        tooltip="filter by command, user or PID, hiding the rest (Enter keeps it, Esc clears it; htop's F4)",
    ),
    Binding(
        "f3",
        "search",
        "Search",
        key_display="F3",
        show=False,
        tooltip="search: select the next process whose command, user or PID matches, hiding none (htop's F3)",
    ),
    Binding("s,f6", "sort_menu", "Sort", tooltip="choose the sort column; also shows or hides columns (htop's F6)"),
    Binding(
        "less_than_sign",
        "sort_move(-1)",
        "Sort←",
        key_display="<",
        show=False,
        tooltip="sort by the column to the left",
    ),
    Binding(
        "greater_than_sign",
        "sort_move(1)",
        "Sort→",
        key_display=">",
        show=False,
        tooltip="sort by the column to the right",
    ),
    Binding("r", "reverse", "Reverse", show=False, tooltip="reverse the sort order"),
    Binding("enter", "details", "Details", tooltip="details of the selected process"),
    Binding("space", "tag", "Tag", key_display="␣", tooltip="tag or untag the selected process"),
    Binding(
        "c",
        "compare",
        "Compare",
        tooltip="compare the two tagged last (or the selected process against --baseline)",
    ),
    Binding(
        "k,f9", "signal", "Kill",
        tooltip="send a signal to the tagged or selected processes, after confirming (htop's F9)",
    ),
    Binding("U", "untag_all", "Untag all", show=False, tooltip="untag every tagged process"),
    Binding("f5", "tree", "Tree", key_display="F5", show=False,
            tooltip="tree view: processes under their parent (PPID), as htop's F5; again: flat"),
    Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="close the search, else clear the filter"),
]

#: the main screen, where `k` cannot send (read-only, replay): say why (hidden, not in the help)
SIGNAL_REFUSED: list[Binding] = [
    Binding("k,f9", "signal_refused", "Kill", show=False, tooltip="say why no signal can be sent"),
]

#: the process table (when it has focus); the mouse also works: click a row, click a header to sort
TABLE: list[Binding] = [
    Binding("up", "cursor(-1)", "Up", show=False, tooltip="select the previous process"),
    Binding("down", "cursor(1)", "Down", show=False, tooltip="select the next process"),
    Binding("pageup", "page(-1)", "Page up", show=False, tooltip="one page up"),
    Binding("pagedown", "page(1)", "Page down", show=False, tooltip="one page down"),
    Binding("home", "cursor_to(0)", "First", show=False, tooltip="first process"),
    Binding("end", "cursor_to(-1)", "Last", show=False, tooltip="last process"),
    Binding(
        "left", "hscroll(-1)", "Columns←", key_display="←", show=False,
        tooltip="show the columns hidden on the left (◀) when the terminal is narrow",
    ),
    Binding(
        "right", "hscroll(1)", "Columns→", key_display="→", show=False,
        tooltip="show the columns hidden on the right (▶) when the terminal is narrow",
    ),
]

_BACK = Binding("escape,q,backspace", "back", "Back", key_display="Esc", tooltip="back to the process list")

DETAILS: list[Binding] = [
    _BACK,
    Binding("enter", "stack", "Stack", tooltip="the selected call site's whole stack (Esc closes it)"),
]

#: the details screen's call-sites panel (it has the focus when the screen opens)
SITES: list[Binding] = [
    Binding("up", "cursor(-1)", "Up", show=False,
            tooltip="select the previous call site (at the first: scroll the page up)"),
    Binding("down", "cursor(1)", "Down", show=False,
            tooltip="select the next call site (at the last: scroll the page down)"),
]

#: a call site's stack (Enter on the details screen)
STACK: list[Binding] = [
    Binding("escape,q", "close", "Close", key_display="Esc", tooltip="close the stack"),
]

COMPARE: list[Binding] = [
    _BACK,
    Binding("x", "swap", "Swap A/B", tooltip="swap the two sides"),
    Binding("b", "next_baseline", "Baseline", tooltip="baseline: compare against the next recorded process"),
]

HELP: list[Binding] = [
    Binding("escape,q,h,question_mark,f1", "close", "Close", key_display="Esc", tooltip="close the help"),
]

SIGNAL: list[Binding] = [
    Binding("escape", "cancel", "Cancel", tooltip="close without sending"),
    Binding("enter", "send", "Send", tooltip="send the highlighted signal"),
]

SORT_MENU: list[Binding] = [
    Binding("escape", "cancel", "Cancel", tooltip="close, the columns back as they were (nothing saved)"),
    Binding("enter", "choose", "Sort by", tooltip="sort by the highlighted column, keep the columns shown (saved)"),
    Binding(
        "x,space",
        "toggle_column",
        "Show/hide",
        key_display="x",
        tooltip="show or hide the highlighted column (Enter keeps it in config.toml, Esc undoes it)",
    ),
]

#: (section title, bindings) in the order the help screen lists them
SECTIONS: list[tuple[str, list[Binding]]] = [
    ("Everywhere", GLOBAL),
    ("Process list", MAIN + TABLE),
    ("Replay (--replay)", REPLAY),
    ("Details", DETAILS + SITES),
    ("Call-site stack", STACK),
    ("Compare", COMPARE),
    ("Sort menu", SORT_MENU),
    ("Signal dialog", SIGNAL),
]
