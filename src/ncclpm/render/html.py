"""The HTML report: one self-contained page (inline CSS, inline SVG timeline, no script, nothing loaded from the
network) rendered from `templates/report.html`. Every value goes through Jinja autoescape, so log text is shown,
never interpreted; a Content-Security-Policy meta tag forbids scripts as a second line of defence."""

from __future__ import annotations

from markupsafe import Markup

from ncclpm import __version__
from ncclpm.model import SCHEMA_VERSION, Diagnosis
from ncclpm.render.jinja import render_template
from ncclpm.render.timeline import build_timeline
from ncclpm.util.escape import html_prose


def inline_code(text: str | None) -> Markup:
    """ncclpm's own prose (summaries, fixes, the story...) marks code with backticks: everything escaped, code
    spans as <code> (`escape.html_prose`, the one place it is done)."""
    return Markup(html_prose(text))


def render_html(d: Diagnosis, verbose: bool = False) -> str:
    return render_template(
        "report.html",
        d,
        timeline=build_timeline(d),
        version=__version__,
        schema_version=SCHEMA_VERSION,
        inline=inline_code,
        clean=d.clean,
        verbose=verbose,
    )
