"""The view layer: what is shown and how, without Textual — columns and sort orders, where each value
lives, number style, the summary, the process tree, compare, history and baseline. Batch mode, the
exporter's words and the dashboard (``gputop.ui``, Textual only) share it."""
