"""A page's declared charset picks a text encoding, never a Python codec that is none: punycode
and idna decode in time quadratic in the body (a 3 MB page labelled punycode took minutes)."""

from __future__ import annotations

import pytest

from coa_envs.web.extract import decode_text, extract


@pytest.mark.parametrize("label", ["punycode", "PUNYCODE", "idna", "rot13", "base64", "undefined"])
def test_a_label_that_is_no_page_encoding_is_ignored(label: str) -> None:
    body = b"xn--mnchen-3ya"  # punycode and idna read it as 'münchen'
    assert decode_text(body, label) == "xn--mnchen-3ya"  # as if undeclared: UTF-8
    meta = f"<html><head><meta charset='{label}'></head><body><p>xn--mnchen-3ya</p></body></html>".encode()
    assert "xn--mnchen-3ya" in decode_text(meta)


@pytest.mark.timeout(120)
def test_a_large_page_labelled_punycode_is_read_as_utf8() -> None:
    body = b"<html><head><meta charset=punycode></head><body><p>" + b"a" * 1_500_000 + b"-" + b"b" * 1_500_000
    page = extract(body, "text/html", "punycode", "http://site.test/")
    assert page.text.startswith("aaaa")


def test_real_encodings_still_apply() -> None:
    assert decode_text("Café".encode("cp1252"), "windows-1252") == "Café"
    assert decode_text("日本語".encode("shift_jis"), "shift_jis") == "日本語"
    assert decode_text("naïve".encode("utf-7"), "utf-7") == "naïve"
