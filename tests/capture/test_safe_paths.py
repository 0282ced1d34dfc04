"""Manifest paths never leave the capture directory."""

from __future__ import annotations

import pytest

from nurec_usd.capture.paths import RealFolders, resolve_inside


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


@pytest.mark.parametrize("folders", [False, True], ids=["plain", "folders resolved once"])
def test_symlinks_inside_are_fine_outside_are_refused(tmp_path, folders):
    """The same answers with the folders' real paths shared between calls (``RealFolders``):
    a link as the file's own name, as a folder on the way, to a file inside or outside."""
    cache = RealFolders() if folders else None
    root = tmp_path / "cap"
    root.mkdir()
    (root / "real.png").write_bytes(b"")
    (root / "inside.png").symlink_to(root / "real.png")
    (tmp_path / "secret.png").write_bytes(b"")
    (root / "outside.png").symlink_to(tmp_path / "secret.png")
    (root / "dir").symlink_to(tmp_path)
    (root / "sub").mkdir()
    (root / "sub" / "a.png").write_bytes(b"")
    (root / "sub" / "up.png").symlink_to(tmp_path / "secret.png")
    (root / "linked").symlink_to(root / "sub")
    for _ in range(2):  # the second round answers from the folders seen in the first
        assert resolve_inside(root, "inside.png", cache) == root / "inside.png"
        assert resolve_inside(root, "sub/a.png", cache) == root / "sub" / "a.png"
        assert resolve_inside(root, "linked/a.png", cache) == root / "linked" / "a.png"
        for rel in ("outside.png", "dir/secret.png", "sub/up.png", "linked/up.png"):
            with pytest.raises(ValueError, match="outside the capture directory"):
                resolve_inside(root, rel, cache)
