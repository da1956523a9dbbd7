"""The `settings-reference` directive: every setting of pipelines/settings.py's SETTINGS table, as a table per
section, generated at build time so that the reference and the code cannot drift.

A setting without help text, or a mode name the code does not know, fails the build: the reference must be
able to say what every setting does.
"""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.errors import ExtensionError

HEADER = ("YAML key", "command line", "type", "default", "modes", "meaning")
WIDTHS = (16, 16, 8, 10, 14, 36)


def _cell(*parts) -> nodes.entry:
    """A table cell of text and ("code", text) parts."""
    para = nodes.paragraph()
    for part in parts:
        if isinstance(part, tuple):
            para += nodes.literal(text=part[1])
        else:
            para += nodes.Text(part)
    return nodes.entry("", para)


def _row(cells) -> nodes.row:
    row = nodes.row()
    for c in cells:
        row += c
    return row


def settings_of(section: str) -> list:
    from pipelines.settings import MODES, SETTINGS

    out = []
    for s in SETTINGS:
        if s.section != section:
            continue
        if not s.help.strip():
            raise ExtensionError(f"settings reference: {s.name} has no help text in pipelines/settings.py")
        unknown = set(s.modes) - set(MODES)
        if unknown:
            raise ExtensionError(f"settings reference: {s.name} names unknown modes {sorted(unknown)}")
        out.append(s)
    return out


class SettingsReference(Directive):
    """```{settings-reference} SECTION``` (setup | processing | dataset)"""

    required_arguments = 1

    def run(self):
        from pipelines.settings import MODES

        section = self.arguments[0]
        settings = settings_of(section)
        if not settings:
            raise ExtensionError(f"settings reference: no setting in section {section!r}")
        table = nodes.table(classes=["settings-reference"])
        group = nodes.tgroup(cols=len(HEADER))
        table += group
        for width in WIDTHS:
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row(_cell(h) for h in HEADER)
        group += head
        body = nodes.tbody()
        for s in settings:
            default = "—" if s.default is None else ("code", repr(s.default) if isinstance(s.default, str)
                                                     else str(s.default))
            body += _row([
                _cell(("code", f"{s.section}.{s.name}")),
                _cell(("code", f"--{s.name}")) if s.cli else _cell("YAML only"),
                _cell(s.type),
                _cell(default),
                _cell("all" if tuple(s.modes) == tuple(MODES) else ", ".join(s.modes)),
                _cell(s.help),
            ])
            # Each setting is a link target: settings.md#setting-max_seq_length
            body[-1][0]["ids"].append(nodes.make_id(f"setting-{s.name}"))
        group += body
        return [table]


def setup(app):
    app.add_directive("settings-reference", SettingsReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
