"""Manifest paths never leave the capture directory."""

from __future__ import annotations

import pytest

from nurec_usd.capture.paths import resolve_inside


def test_plain_relative_path(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.png").write_bytes(b"")
    assert resolve_inside(tmp_path, "a/b.png") == tmp_path / "a" / "b.png"


@pytest.mark.parametrize("rel, words", [
    ("../x.png", "leaves the capture directory"),
    ("a/../../x.png", "leaves the capture directory"),
    ("/etc/passwd", "absolute"),
    ("C:/x.png", "absolute"),
    ("a\\b.png", "'/'-separated"),
])
def test_refused(tmp_path, rel, words):
    with pytest.raises(ValueError, match=words):
        resolve_inside(tmp_path, rel)


def test_symlinks_inside_are_fine_outside_are_refused(tmp_path):
    root = tmp_path / "cap"
    root.mkdir()
    (root / "real.png").write_bytes(b"")
    (root / "inside.png").symlink_to(root / "real.png")
    (tmp_path / "secret.png").write_bytes(b"")
    (root / "outside.png").symlink_to(tmp_path / "secret.png")
    (root / "dir").symlink_to(tmp_path)
    assert resolve_inside(root, "inside.png") == root / "inside.png"
    with pytest.raises(ValueError, match="outside the capture directory"):
        resolve_inside(root, "outside.png")
    with pytest.raises(ValueError, match="outside the capture directory"):
        resolve_inside(root, "dir/secret.png")
