"""Provenance inside exported figure files (issue 15, "Figures worth exporting"): the run, its config and the
interplab version, written in each format's own metadata place so a figure found on its own says what made it.

- PNG: `tEXt` chunks (`Software`, `interplab`) inserted after IHDR;
- SVG: a `<metadata>` element (JSON) and a comment right after the opening `<svg>` tag;
- PDF: an incremental update with a new document-information dictionary (`/Producer`, `/Subject`, `/Keywords`),
  appended after the original bytes (a PDF reader uses the last trailer; the original file is a prefix);
- HTML: a comment at the top and a `<meta name="interplab">` tag.

`read_metadata(bytes, fmt)` reads it back (used by the tests, and handy for a file someone sent you)."""
from __future__ import annotations

import html
import json
import re
import struct
import zlib
from typing import Any

__all__ = ["figure_metadata", "embed_metadata", "read_metadata"]

KEY = "interplab"


def figure_metadata(run=None, name: str | None = None, config: Any = None) -> dict:
    """{"interplab_version", "figure", "run", "experiment", "config"} for a figure of `run` (a RunDir), or of a
    bare config."""
    import interplab

    meta: dict[str, Any] = {"interplab_version": interplab.__version__}
    if name:
        meta["figure"] = name
    if run is not None:
        meta["run"] = f"{run.kind}/{run.name}"
        meta["experiment"] = run.kind
        if config is None:
            try:
                from interplab.core.io import read_json

                config = read_json(run.path / "config.json").get("config")
            except Exception:  # noqa: BLE001 - a run without a config.json still gets its name
                config = None
    if config is not None:
        meta["config"] = _plain(config)
    return meta


def _plain(cfg: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        cfg = dataclasses.asdict(cfg)
    return json.loads(json.dumps(cfg, default=str))


def _software(meta: dict) -> str:
    """The producer tag: the version the metadata names, else this installation's (never an empty version)."""
    import interplab

    return f"interplab {meta.get('interplab_version') or interplab.__version__}"


def embed_metadata(data: bytes, fmt: str, meta: dict) -> bytes:
    """`data` (a rendered figure in `fmt`) with `meta` written into it."""
    text = json.dumps(meta, sort_keys=True)
    if fmt == "png":
        return _png(data, {"Software": _software(meta), KEY: text})
    if fmt == "svg":
        return _svg(data.decode("utf-8"), text).encode("utf-8")
    if fmt == "pdf":
        return _pdf(data, meta, text)
    if fmt == "html":
        return _html(data.decode("utf-8"), text).encode("utf-8")
    return data


# ------------------------------------------------------------------------------------------------------ PNG
def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def _png(data: bytes, fields: dict[str, str]) -> bytes:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    ihdr_end = 8 + 8 + struct.unpack(">I", data[8:12])[0] + 4
    extra = b"".join(_chunk(b"tEXt", k.encode("latin-1") + b"\0" + v.encode("latin-1", "replace"))
                     for k, v in fields.items())
    return data[:ihdr_end] + extra + data[ihdr_end:]


def _png_text(data: bytes) -> dict[str, str]:
    out, i = {}, 8
    while i + 8 <= len(data):
        n = struct.unpack(">I", data[i:i + 4])[0]
        kind = data[i + 4:i + 8]
        if kind == b"tEXt":
            k, _, v = data[i + 8:i + 8 + n].partition(b"\0")
            out[k.decode("latin-1")] = v.decode("latin-1")
        i += 12 + n
    return out


# ------------------------------------------------------------------------------------------------------ SVG / HTML
def _svg(svg: str, text: str) -> str:
    m = re.search(r"<svg\b[^>]*>", svg)
    if not m:
        raise ValueError("not an SVG document")
    block = (f"<!-- {KEY}: {text.replace('--', '- -')} -->"
             f'<metadata id="{KEY}"><![CDATA[{text.replace("]]>", "]] >")}]]></metadata>')
    return svg[:m.end()] + block + svg[m.end():]


def _html(page: str, text: str) -> str:
    comment = f"<!-- {KEY}: {text.replace('--', '- -')} -->\n"
    meta = f'<meta name="{KEY}" content="{html.escape(text, quote=True)}">'
    page = page.replace("<head>", "<head>" + meta, 1) if "<head>" in page else page
    return comment + page


# ------------------------------------------------------------------------------------------------------ PDF
def _pdf_str(s: str) -> bytes:
    return b"(" + s.encode("latin-1", "replace").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _pdf(data: bytes, meta: dict, text: str) -> bytes:
    """Append an incremental update whose trailer points at a new Info dictionary (the original bytes are kept)."""
    m = list(re.finditer(rb"startxref\s+(\d+)", data))
    if not m:
        raise ValueError("not a PDF file (no startxref)")
    prev = int(m[-1].group(1))
    tail = data[prev:]
    size_m = re.search(rb"/Size\s+(\d+)", tail) or re.search(rb"/Size\s+(\d+)", data)
    root_m = re.search(rb"/Root\s+(\d+\s+\d+\s+R)", tail) or re.search(rb"/Root\s+(\d+\s+\d+\s+R)", data)
    if not size_m or not root_m:
        raise ValueError("cannot find the PDF trailer's /Size and /Root")
    size, root = int(size_m.group(1)), root_m.group(1)
    keywords = " ".join(f"{k}={v}" for k, v in meta.items() if k != "config")
    info = (b"<< /Producer " + _pdf_str(_software(meta)) +
            b" /Subject " + _pdf_str(text) + b" /Keywords " + _pdf_str(keywords) +
            b" /Title " + _pdf_str(str(meta.get("figure", ""))) + b" >>")
    body = data if data.endswith(b"\n") else data + b"\n"
    off = len(body)
    obj = f"{size} 0 obj\n".encode() + info + b"\nendobj\n"
    xref_at = off + len(obj)
    xref = f"xref\n{size} 1\n{off:010d} 00000 n \n".encode()
    trailer = (f"trailer\n<< /Size {size + 1} /Root ".encode() + root + f" /Info {size} 0 R /Prev {prev} >>\n"
               f"startxref\n{xref_at}\n%%EOF\n".encode())
    return body + obj + xref + trailer


def _pdf_meta(data: bytes) -> str | None:
    m = list(re.finditer(rb"/Subject\s+\(((?:\\.|[^\\)])*)\)", data))
    if not m:
        return None
    raw = re.sub(rb"\\(.)", rb"\1", m[-1].group(1))
    return raw.decode("latin-1")


# ------------------------------------------------------------------------------------------------------ reading
def read_metadata(data: bytes, fmt: str) -> dict | None:
    """The metadata `embed_metadata` wrote, or None."""
    try:
        if fmt == "png":
            t = _png_text(data).get(KEY)
        elif fmt == "pdf":
            t = _pdf_meta(data)
        else:
            m = re.search(rf"<!-- {KEY}: (.*?) -->", data.decode("utf-8"), re.S)
            t = m.group(1).replace("- -", "--") if m else None
        return json.loads(t) if t else None
    except (ValueError, UnicodeDecodeError):
        return None
