"""Hostile tensor names stay inert in DOT, SVG and XML, and still render with `dot`."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest

from tests.export.scenarios import seed_stale
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.export.dot import graph_dot, svg_text
from vizalloc.export.escape import dot_html, dot_quoted, xml_escape
from vizalloc.export.findings import highlights
from vizalloc.export.layout import layout_svg
from vizalloc.export.perfetto import perfetto_json

HOSTILE = (
    '"quoted" \\" end',
    "<script>alert('x')</script>",
    "line1\nline2\r\x00\x1b[31m",
    "{braces} [brackets] -> edge; }",
    "back\\slash\\N\\G\\L",
    "uni\u00e9\u4e2d\U0001f600 rtl\u202eevil \ud800",
    "&amp; &lt; &#60; ]]> <!-- -->",
    "x" * 5000,
)


def test_dot_html_is_ascii_and_entity_escaped():
    s = dot_html("<b>&\"'\u00e9</b>")
    assert s == "&lt;b&gt;&amp;&quot;&#39;&#233;&lt;/b&gt;"
    assert s.isascii()


def test_dot_quoted_escapes_backslash_quote_and_ampersand():
    assert dot_quoted('a"b\\c&d\u00e9') == '"a\\"b\\\\c&amp;d&#233;"'
    assert dot_quoted("a\nb") == '"a\\\\nb"'  # a newline in a name shows as the two characters \n


def test_xml_escape():
    assert xml_escape("<a href='x'>&\"</a>") == "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"


def _hostile_model():
    # graph B (drawn by default) holds x, t, y, z, q; graph A holds x, t, u, s
    quotes, script, newline, braces, backslash, unicode, entities = HOSTILE[:7]
    return build_model(seed_stale(names=(quotes, script, backslash, entities, braces, newline, unicode)))


def test_hostile_names_in_dot_are_escaped():
    model = _hostile_model()
    text = graph_dot(model, highlights=highlights(find_hazards(model)))
    assert text.isascii()
    assert "<script>" not in text and "&lt;script&gt;" in text
    # no raw newline or NUL inside any statement; one statement per line
    for line in text.splitlines():
        assert "\x00" not in line and "\r" not in line and "\x1b" not in line
    # every quoted string is closed: an even number of unescaped quotes per line
    for line in text.splitlines():
        stripped = line.replace('\\\\', "").replace('\\"', "")
        assert stripped.count('"') % 2 == 0, line


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed: cannot check rendering")
def test_hostile_names_render_with_dot_and_svg_parses():
    model = _hostile_model()
    for binding in sorted(model.bindings):  # graph A, then graph B
        ET.fromstring(svg_text(graph_dot(model, binding_id=binding)).encode("utf-8"))
    svg = svg_text(graph_dot(model, highlights=highlights(find_hazards(model))))
    root = ET.fromstring(svg.encode("utf-8"))
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert "<script>alert('x')</script>" in texts  # shown as text...
    assert not any(el.tag.endswith("script") for el in root.iter())  # ...never as an element
    assert "{braces} [brackets] -> edge; }" in texts
    assert "line1\\nline2\\r\\x00\\x1b[31m" in texts  # control characters shown as escapes
    assert "uni\u00e9\u4e2d\U0001f600 rtl\\u202eevil \\ud800" in texts


def test_very_long_names_are_cut_in_labels():
    model = build_model(seed_stale(names=(HOSTILE[7], "t", "u", "s", "y", "z", "q")))
    text = graph_dot(model)
    label = next(line for line in text.splitlines() if "tooltip=\"xxx" in line).split(", tooltip=")[0]
    assert "x" * 39 + "&#8230;" in label and "x" * 40 not in label  # cut with an ellipsis
    assert "x" * 300 not in text  # tooltips are cut too


def test_hostile_names_in_layout_svg_parse_and_stay_text():
    model = _hostile_model()
    svg = layout_svg(model, highlights=highlights(find_hazards(model)))
    root = ET.fromstring(svg.encode("utf-8"))
    assert not any(el.tag.endswith("script") for el in root.iter())
    titles = [el.text or "" for el in root.iter() if el.tag.endswith("title")]
    assert any("<script>alert('x')</script>" in t for t in titles)
    assert "\x00" not in svg and "\ud800" not in svg


def test_hostile_names_in_perfetto_json():
    model = _hostile_model()
    text = perfetto_json(model, highlights(find_hazards(model)))
    doc = json.loads(text)
    names = {e["name"] for e in doc["traceEvents"]}
    assert "<script>alert('x')</script>" in names
    assert not any(0xD800 <= ord(c) <= 0xDFFF for name in names for c in name)  # no lone surrogates
    text.encode("utf-8")  # strictly encodable
