"""QR codes of the phone URL (``segno``, pure Python): for the terminal and for a web page."""

from __future__ import annotations

import io

import segno


def terminal(text: str) -> str:
    """``text`` as a QR code drawn with Unicode half blocks (two modules a character row,
    the quiet zone scanners need around it): light modules are the terminal's foreground,
    right for the usual light-on-dark terminal (phone cameras also read it inverted)."""
    code = segno.make(text, error="l")
    rows = [[bool(m) for m in row] for row in code.matrix_iter(scale=1, border=2)]
    if len(rows) % 2:
        rows.append([False] * len(rows[0]))
    glyph = {(False, False): "█", (True, False): "▄", (False, True): "▀", (True, True): " "}
    return "\n".join(
        "".join(glyph[(top, bottom)] for top, bottom in zip(upper, lower, strict=True))
        for upper, lower in zip(rows[0::2], rows[1::2], strict=True)
    )


def svg(text: str) -> str:
    """``text`` as an inline SVG element (no XML declaration)."""
    out = io.BytesIO()
    segno.make(text, error="m").save(out, kind="svg", scale=6, border=2, xmldecl=False, svgns=True)
    return out.getvalue().decode()
