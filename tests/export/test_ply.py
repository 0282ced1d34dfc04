"""The 3DGS PLY export: the exact layout, round trips through our reader and through ``plyfile``,
the SH coefficient order, and clear errors on malformed files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nurec_usd.export.ply import read_gaussian_ply, write_gaussian_ply
from nurec_usd.scene.gaussians import GaussianParams

DEGREES = (0, 1, 2, 3)
F_REST = {0: 0, 1: 9, 2: 24, 3: 45}  # the counts every 3DGS reader expects


def layout(degree: int) -> list[str]:
    """The 3DGS vertex properties, spelled out here independently of the module."""
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + [f"f_rest_{i}" for i in range(F_REST[degree])]
            + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def random_params(n: int, seed: int = 0, dtype=torch.float32) -> GaussianParams:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return GaussianParams(r(n, 3) * 50, r(n, 4), r(n, 3) - 3, r(n) * 4, r(n, 1, 3), r(n, 15, 3), r(n))


def coded_params(n: int) -> GaussianParams:
    """Every value says where it came from: shN[i, k-1, c] = 1000 i + 100 c + k (k >= 1), etc."""
    p = random_params(n)
    i = torch.arange(n, dtype=torch.float32)[:, None, None]
    k = torch.arange(1, 16, dtype=torch.float32)[None, :, None]
    c = torch.arange(3, dtype=torch.float32)[None, None, :]
    p.shN = 1000 * i + 100 * c + k
    p.sh0 = -(1000 * i + 100 * c)[:, :1, :] - 0.5
    return p


def header_of(path: Path) -> str:
    data = path.read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    return data[:end].decode("ascii")


def bits(t: torch.Tensor | np.ndarray) -> np.ndarray:
    """float32 values as their bit patterns (exact comparison, NaN and -0.0 included)."""
    a = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same(got: GaussianParams, want: GaussianParams, degree: int) -> None:
    k = (degree + 1) ** 2
    for name in ("means", "quats", "log_scales", "opacity_logits", "sh0"):
        assert getattr(got, name).dtype == torch.float32, name
        np.testing.assert_array_equal(bits(getattr(got, name)), bits(getattr(want, name)), err_msg=name)
    np.testing.assert_array_equal(bits(got.shN[:, : k - 1]), bits(want.shN[:, : k - 1]))
    assert not got.shN[:, k - 1:].any(), "coefficients above the file's degree come back zero"
    assert not got.intensity_logits.any() and got.intensity_logits.shape == (len(want),)


# --- the layout -------------------------------------------------------------------------------


@pytest.mark.parametrize("degree", DEGREES)
@pytest.mark.parametrize("n", [0, 1, 7])
def test_header_is_the_3dgs_layout_exactly(tmp_path, degree, n):
    path = write_gaussian_ply(random_params(n), degree, tmp_path / "scene.ply")
    assert path == tmp_path / "scene.ply"
    expected = ("ply\nformat binary_little_endian 1.0\n" + f"element vertex {n}\n"
                + "".join(f"property float {name}\n" for name in layout(degree)) + "end_header\n")
    assert header_of(path) == expected
    assert path.stat().st_size == len(expected) + n * 4 * len(layout(degree))
    if degree == 3:
        assert len(layout(degree)) == 62
    assert [p.name for p in tmp_path.iterdir()] == ["scene.ply"], "no temporary file left behind"


@pytest.mark.parametrize("degree", DEGREES)
def test_f_rest_is_channel_major(tmp_path, degree):
    """f_rest_{c (K-1) + (k-1)} holds coefficient k of channel c (the 3DGS ``transpose(1, 2)``)."""
    n, k_count = 3, (degree + 1) ** 2
    path = write_gaussian_ply(coded_params(n), degree, tmp_path / "s.ply")
    names = layout(degree)
    raw = np.frombuffer(path.read_bytes()[len(header_of(path)):], dtype="<f4").reshape(n, len(names))
    for j in range(F_REST[degree]):
        c, k = divmod(j, k_count - 1)
        col = raw[:, names.index(f"f_rest_{j}")]
        np.testing.assert_array_equal(col, 1000 * np.arange(n) + 100 * c + (k + 1), err_msg=f"f_rest_{j}")
    for c in range(3):
        np.testing.assert_array_equal(raw[:, names.index(f"f_dc_{c}")], -(1000 * np.arange(n) + 100 * c) - 0.5)
    assert not raw[:, 3:6].any(), "normals are zero"


def test_values_are_written_pre_activation_and_as_stored(tmp_path):
    p = GaussianParams.create(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.5, 1.0, 2.0]]),
                              torch.tensor([[0.25, 0.5, 0.75]]), opacity=0.3,
                              quats=torch.tensor([[2.0, 0.0, 0.0, 0.0]]))  # unnormalised, w first
    path = write_gaussian_ply(p, 0, tmp_path / "s.ply")
    names = layout(0)
    row = dict(zip(names, np.frombuffer(path.read_bytes()[len(header_of(path)):], dtype="<f4")))
    assert [row["x"], row["y"], row["z"]] == [1.0, 2.0, 3.0]
    assert row["opacity"] == pytest.approx(np.log(0.3 / 0.7), rel=1e-6)
    assert [row[f"scale_{i}"] for i in range(3)] == pytest.approx(np.log([0.5, 1.0, 2.0]).tolist(), abs=1e-6)
    assert [row[f"rot_{i}"] for i in range(4)] == [2.0, 0.0, 0.0, 0.0]
    assert (0.5 + 0.28209479177387814 * np.array([row[f"f_dc_{i}"] for i in range(3)])) == pytest.approx(
        [0.25, 0.5, 0.75], abs=1e-6)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("degree", DEGREES)
@pytest.mark.parametrize("n", [0, 1, 257])
def test_round_trip_through_our_reader(tmp_path, degree, n):
    want = random_params(n, seed=degree)
    got, got_degree = read_gaussian_ply(write_gaussian_ply(want, degree, tmp_path / "s.ply"))
    assert got_degree == degree and len(got) == n
    got.check("round trip")
    assert_same(got, want, degree)


def test_round_trip_keeps_every_float32_bit(tmp_path):
    special = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1.17549435e-38, 3.4028235e38, -3.4028235e38,
                            float("inf"), float("-inf"), float("nan"), 1 / 3, -np.pi], dtype=torch.float32)
    n = special.numel()
    p = random_params(n)
    p.means[:, 0], p.opacity_logits, p.log_scales[:, 2] = special, special.flip(0), special
    p.quats[:, 3], p.shN[:, 14, 2], p.sh0[:, 0, 1] = special, special, special
    got, _ = read_gaussian_ply(write_gaussian_ply(p, 3, tmp_path / "s.ply"))
    assert_same(got, p, 3)


def test_float64_and_grad_parameters_are_written_as_float32(tmp_path):
    p = random_params(5, dtype=torch.float64).map(lambda t: t.requires_grad_(True))
    got, _ = read_gaussian_ply(write_gaussian_ply(p, 2, tmp_path / "s.ply"))
    assert_same(got, p.map(lambda t: t.detach().float()), 2)


@pytest.mark.parametrize("degree", DEGREES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_round_trip_through_plyfile(tmp_path, degree, n):
    plyfile = pytest.importorskip("plyfile")
    p = coded_params(n)
    p.means, p.opacity_logits = random_params(n, seed=3).means, random_params(n, seed=4).opacity_logits
    ply = plyfile.PlyData.read(str(write_gaussian_ply(p, degree, tmp_path / "s.ply")))
    assert [e.name for e in ply.elements] == ["vertex"] and not ply.text and ply.byte_order == "<"
    v = ply["vertex"]
    assert v.count == n
    assert [prop.name for prop in v.properties] == layout(degree)
    assert all(prop.val_dtype in ("f4", "float32") for prop in v.properties)
    k_count = (degree + 1) ** 2

    def same(name, want):
        np.testing.assert_array_equal(bits(v[name]), bits(want), err_msg=name)

    for i, axis in enumerate("xyz"):
        same(axis, p.means[:, i])
        same("n" + axis, torch.zeros(n))
    for c in range(3):
        same(f"f_dc_{c}", p.sh0[:, 0, c])
        for k in range(1, k_count):
            same(f"f_rest_{c * (k_count - 1) + (k - 1)}", p.shN[:, k - 1, c])
    same("opacity", p.opacity_logits)
    for i in range(3):
        same(f"scale_{i}", p.log_scales[:, i])
    for i in range(4):
        same(f"rot_{i}", p.quats[:, i])


@pytest.mark.parametrize("degree", DEGREES)
def test_padded_to_degree_3_has_45_f_rest_for_plyfile(tmp_path, degree):
    """pad_to_degree=3: the layout of degree 3 (45 f_rest, channel-major), the scene's own
    coefficients in their places and zeros past its degree, however the unused ones were set."""
    plyfile = pytest.importorskip("plyfile")
    p = coded_params(6)  # every shN value non-zero, also past the degree in use
    ply = plyfile.PlyData.read(str(write_gaussian_ply(p, degree, tmp_path / "s.ply", pad_to_degree=3)))
    v = ply["vertex"]
    assert [prop.name for prop in v.properties] == layout(3)
    assert len([prop for prop in v.properties if prop.name.startswith("f_rest_")]) == 45
    k_used = (degree + 1) ** 2
    for c in range(3):
        np.testing.assert_array_equal(bits(v[f"f_dc_{c}"]), bits(p.sh0[:, 0, c]))
        for k in range(1, 16):
            want = p.shN[:, k - 1, c] if k < k_used else torch.zeros(6)
            np.testing.assert_array_equal(bits(v[f"f_rest_{c * 15 + (k - 1)}"]), bits(want), err_msg=(c, k))
    got, got_degree = read_gaussian_ply(tmp_path / "s.ply")
    assert got_degree == 3
    assert_same(got, p, degree)
    assert not got.shN[:, k_used - 1:].any()


def test_padding_never_truncates(tmp_path):
    with pytest.raises(ValueError, match="pad_to_degree: 1 is below the scene's SH degree 2"):
        write_gaussian_ply(random_params(3), 2, tmp_path / "s.ply", pad_to_degree=1)
    assert not (tmp_path / "s.ply").exists()


def _plyfile_3dgs(path: Path, p: GaussianParams, degree: int, *, text=False, byte_order="<",
                  drop=(), extra=(), dtype="f4", order=None):
    """A file written by plyfile the way the original 3DGS ``save_ply`` does, with optional variations."""
    plyfile = pytest.importorskip("plyfile")
    n, k_count = len(p), (degree + 1) ** 2
    rest = p.shN[:, : k_count - 1].transpose(1, 2).reshape(n, -1).numpy()  # 3DGS: transpose(1, 2).flatten(1)
    values = np.concatenate([p.means.numpy(), np.zeros((n, 3), np.float32), p.sh0.reshape(n, 3).numpy(), rest,
                             p.opacity_logits[:, None].numpy(), p.log_scales.numpy(), p.quats.numpy()], axis=1)
    columns = dict(zip(layout(degree), values.T))
    columns.update({name: np.full(n, 7, dtype=np.uint8) for name in extra})
    names = [name for name in (order or list(columns)) if name not in drop]
    table = np.empty(n, dtype=[(name, "u1" if name in extra else dtype) for name in names])
    for name in names:
        table[name] = columns[name]
    plyfile.PlyData([plyfile.PlyElement.describe(table, "vertex")], text=text, byte_order=byte_order).write(str(path))
    return path


@pytest.mark.parametrize("degree", DEGREES)
def test_our_reader_reads_a_plyfile_written_3dgs_file(tmp_path, degree):
    p = random_params(11, seed=degree)
    got, got_degree = read_gaussian_ply(_plyfile_3dgs(tmp_path / "s.ply", p, degree))
    assert got_degree == degree
    assert_same(got, p, degree)


@pytest.mark.parametrize("variant", [dict(text=True), dict(byte_order=">"), dict(dtype="f8"),
                                     dict(extra=("red", "green", "blue")), dict(drop=("nx", "ny", "nz"))])
def test_our_reader_reads_other_tools_variants(tmp_path, variant):
    p = random_params(6, seed=1)
    got, degree = read_gaussian_ply(_plyfile_3dgs(tmp_path / "s.ply", p, 2, **variant))
    assert degree == 2
    assert_same(got, p, 2)  # ASCII too: plyfile prints enough digits for every float32 to come back exactly


def test_our_reader_finds_properties_by_name_in_any_order(tmp_path):
    p = random_params(4, seed=2)
    shuffled = layout(1)[::-1]
    got, degree = read_gaussian_ply(_plyfile_3dgs(tmp_path / "s.ply", p, 1, order=shuffled))
    assert degree == 1
    assert_same(got, p, 1)


def test_write_replaces_an_existing_file_and_overwrites_nothing_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "s.ply"
    write_gaussian_ply(random_params(3), 1, path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="sh_degree"):
        write_gaussian_ply(random_params(3), 4, path)
    bad = random_params(3)
    bad.shN = bad.shN[:, :8]
    with pytest.raises(ValueError, match="shN"):
        write_gaussian_ply(bad, 1, path)

    def refuse(self, target):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_gaussian_ply(random_params(5), 3, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [q.name for q in tmp_path.iterdir()] == ["s.ply"]
    write_gaussian_ply(random_params(2), 0, path)
    assert read_gaussian_ply(path)[1] == 0 and len(read_gaussian_ply(path)[0]) == 2


@pytest.mark.parametrize("degree", [-1, 4, 1.0, True, "2", None])
def test_bad_sh_degree(tmp_path, degree):
    with pytest.raises(ValueError, match="sh_degree"):
        write_gaussian_ply(random_params(2), degree, tmp_path / "s.ply")
    assert not list(tmp_path.iterdir())


# --- malformed files --------------------------------------------------------------------------


@pytest.fixture
def good(tmp_path) -> Path:
    return write_gaussian_ply(random_params(10), 3, tmp_path / "good.ply")


def _broken(good: Path, data: bytes) -> Path:
    path = good.with_name("broken.ply")
    path.write_bytes(data)
    return path


def _raises(path: Path, *fragments: str) -> str:
    with pytest.raises(ValueError) as info:
        read_gaussian_ply(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("cut", [1, 4, 248, 2000])
def test_truncated_body(good, cut):
    _raises(_broken(good, good.read_bytes()[:-cut]), "truncated")


@pytest.mark.parametrize("keep", [0, 3, 40, 300])
def test_truncated_header(good, keep):
    _raises(_broken(good, good.read_bytes()[:keep]))


def test_trailing_bytes(good):
    _raises(_broken(good, good.read_bytes() + b"\0\0\0\0"), "unexpected bytes")


@pytest.mark.parametrize("name", ["x", "f_dc_1", "opacity", "scale_1", "rot_3"])
def test_missing_property(tmp_path, name):
    path = _plyfile_3dgs(tmp_path / "s.ply", random_params(4), 1, drop=(name,))
    _raises(path, "missing property", repr(name))


def test_missing_f_rest_property(tmp_path):
    path = _plyfile_3dgs(tmp_path / "s.ply", random_params(4), 1, drop=("f_rest_4",))
    _raises(path, "f_rest", "8 f_rest_* properties")
    p = random_params(4)
    renamed = _plyfile_3dgs(tmp_path / "r.ply", p, 1)
    renamed.write_bytes(renamed.read_bytes().replace(b"property float f_rest_4\n", b"property float f_rest_9\n"))
    _raises(renamed, "missing property 'f_rest_4'")


def test_missing_property_in_a_header_edited_by_hand(good):
    # the property line dropped and its bytes with it would be a different file: only the header changes here
    data = good.read_bytes().replace(b"property float scale_1\n", b"")
    _raises(_broken(good, data), "unexpected bytes")
    data = good.read_bytes().replace(b"property float scale_1\n", b"property float scale_9\n")
    _raises(_broken(good, data), "missing property 'scale_1'")


@pytest.mark.parametrize("old, new, fragment", [
    (b"ply\n", b"plx\n", "not a PLY file"),
    (b"binary_little_endian", b"binary_middle_endian", "format"),
    (b"1.0\n", b"2.0\n", "format"),
    (b"element vertex 10\n", b"element vertex ten\n", "element"),
    (b"element vertex 10\n", b"element face 10\n", "'vertex'"),
    (b"property float x\n", b"property quad x\n", "'x'"),
    (b"property float x\n", b"property list uchar float x\n", "'x'"),
    (b"property float y\n", b"property float x\n", "'x' appears twice"),
    (b"property float z\n", b"propertee float z\n", "propertee"),
    (b"end_header\n", b"end_hedaer\n", "end_header"),
])
def test_malformed_header(good, old, new, fragment):
    data = good.read_bytes()
    assert old in data
    _raises(_broken(good, data.replace(old, new, 1)), fragment)


def test_not_a_ply_and_empty(tmp_path):
    (tmp_path / "a.ply").write_bytes(b"")
    _raises(tmp_path / "a.ply", "not a PLY file")
    (tmp_path / "b.ply").write_bytes(np.random.default_rng(0).bytes(4096))
    _raises(tmp_path / "b.ply")


def test_truncated_ascii(tmp_path):
    path = _plyfile_3dgs(tmp_path / "s.ply", random_params(5), 0, text=True)
    lines = path.read_bytes().splitlines(keepends=True)
    _raises(_broken(path, b"".join(lines[:-1])), "truncated")
    _raises(_broken(path, b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]), "vertex 4")
