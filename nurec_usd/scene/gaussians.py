"""The reconstructed scene: static and actor Gaussians, actor tracks, sky and per-camera exposure.

Parameters are stored pre-activation, as they are optimised:
``log_scales`` (scale = exp), ``opacity_logits`` (opacity = sigmoid), unnormalised ``quats``
(w, x, y, z), SH coefficients in two tensors, ``sh0`` [N, 1, 3] (DC) and ``shN`` [N, 15, 3]
(degrees 1-3, always allocated; ``Scene.sh_degree`` says how many are in use; two tensors so
that each gets its own learning rate), ``intensity_logits`` (lidar return intensity = sigmoid).
Static Gaussians live in the world frame; actor Gaussians in their actor's box frame.

A scene saves to and loads from one ``scene.pt`` file (tensors + a small JSON-able header),
which later ``export`` and ``render`` commands read without retraining.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nurec_usd.util.io_errors import naming
from nurec_usd.util.staging import atomic_file

SH_COEFFS = 16  # degree 3
SH_C0 = 0.28209479177387814  # colour = 0.5 + SH_C0 * DC
FORMAT_VERSION = 1


# The activations: the one place that says how pre-activation parameters become the values the
# renderers, the export and the collision mesh use.

def scales_of(log_scales: torch.Tensor) -> torch.Tensor:  # [..., 3] -> [..., 3] linear standard deviations
    return log_scales.exp()


def opacities_of(opacity_logits: torch.Tensor) -> torch.Tensor:  # [...] -> [...] in (0, 1)
    return torch.sigmoid(opacity_logits)


def intensities_of(intensity_logits: torch.Tensor) -> torch.Tensor:  # [...] -> [...] lidar return intensity in (0, 1)
    return torch.sigmoid(intensity_logits)


def unit_quats(quats: torch.Tensor) -> torch.Tensor:  # [..., 4] (w, x, y, z) -> unit; a zero quaternion -> identity
    norm = quats.norm(dim=-1, keepdim=True)
    identity = torch.zeros_like(quats)
    identity[..., 0] = 1.0
    return torch.where(norm > 0, quats / torch.where(norm > 0, norm, torch.ones_like(norm)), identity)


def rgb_to_sh_dc(rgb: torch.Tensor) -> torch.Tensor:
    """The DC SH coefficient giving colour ``rgb`` in [0, 1]. ``[..., 3]`` -> ``[..., 3]``."""
    return (rgb - 0.5) / SH_C0


@dataclass
class GaussianParams:
    """N Gaussians, pre-activation. Every field has N rows."""

    means: torch.Tensor  # [N, 3]
    quats: torch.Tensor  # [N, 4] (w, x, y, z), any norm
    log_scales: torch.Tensor  # [N, 3]
    opacity_logits: torch.Tensor  # [N]
    sh0: torch.Tensor  # [N, 1, 3] DC
    shN: torch.Tensor  # [N, 15, 3] degrees 1-3
    intensity_logits: torch.Tensor  # [N]

    FIELDS = ("means", "quats", "log_scales", "opacity_logits", "sh0", "shN", "intensity_logits")

    def __len__(self) -> int:
        return int(self.means.shape[0])

    @classmethod
    def create(cls, means: torch.Tensor,  # [N, 3]
               scales: torch.Tensor,  # [N, 3] linear
               rgb: torch.Tensor,  # [N, 3] in [0, 1]
               opacity: float = 0.1,
               intensity: torch.Tensor | None = None,  # [N] in (0, 1)
               quats: torch.Tensor | None = None,  # [N, 4]
               ) -> "GaussianParams":
        """New Gaussians with activated initial values (identity rotations unless given)."""
        n, device, dtype = means.shape[0], means.device, means.dtype
        if quats is None:
            quats = torch.zeros(n, 4, dtype=dtype, device=device)
            quats[:, 0] = 1.0
        sh0 = rgb_to_sh_dc(rgb.to(dtype))[:, None, :]
        if intensity is None:
            intensity = torch.full((n,), 0.2, dtype=dtype, device=device)
        return cls(means.contiguous(), quats.contiguous(), scales.clamp_min(1e-6).log().contiguous(),
                   torch.full((n,), float(torch.logit(torch.tensor(opacity))), dtype=dtype, device=device),
                   sh0.contiguous(), torch.zeros(n, SH_COEFFS - 1, 3, dtype=dtype, device=device),
                   torch.logit(intensity.clamp(1e-4, 1 - 1e-4)).to(dtype).contiguous())

    @classmethod
    def empty(cls, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> "GaussianParams":
        z = lambda *s: torch.zeros(*s, dtype=dtype, device=device)  # noqa: E731
        return cls(z(0, 3), z(0, 4), z(0, 3), z(0), z(0, 1, 3), z(0, SH_COEFFS - 1, 3), z(0))

    @property
    def sh(self) -> torch.Tensor:
        """All SH coefficients, DC first. Returns ``[N, 16, 3]``."""
        return torch.cat((self.sh0, self.shN), dim=1)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def map(self, fn) -> "GaussianParams":
        """A new set with ``fn`` applied to every tensor."""
        return GaussianParams(**{k: fn(v) for k, v in self.tensors().items()})

    def check(self, where: str) -> None:
        """Shapes agree; raises ValueError naming ``where`` and the field."""
        n = len(self)
        shapes = {"means": (n, 3), "quats": (n, 4), "log_scales": (n, 3), "opacity_logits": (n,),
                  "sh0": (n, 1, 3), "shN": (n, SH_COEFFS - 1, 3), "intensity_logits": (n,)}
        for name, shape in shapes.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"{where}.{name}: expected shape {shape}, got {tuple(getattr(self, name).shape)}")


@dataclass
class ActorTrack:
    """One tracked actor: its keyed box poses (box -> world), seconds since the capture start."""

    id: str
    label: str
    size_m: list[float]  # length, width, height
    times: torch.Tensor  # [K] float64 seconds
    T_world_box: torch.Tensor  # [K, 4, 4] float64


@dataclass
class Scene:
    """Everything ``build`` optimises and ``export`` / ``render`` read back.

    ``actor_index[i]`` is the track (index into ``tracks``) of actor Gaussian i.
    ``sky`` is an equirectangular environment map over the world's directions (rows:
    elevation from +90 down to -90 degrees, columns: azimuth from -180 to 180), pre-sigmoid.
    ``exposure[c]`` is camera ``camera_ids[c]``'s colour correction: per-channel log gain (3)
    and bias (3), applied as ``rgb * exp(gain) + bias``.
    ``vignetting[c]`` is its lens falloff: (k1, k2) of a log gain ``k1 u + k2 u^2`` added to the
    exposure's at each pixel, ``u = 1 - cos(theta)`` for the angle theta of the pixel's ray off
    the optical axis (zeros: none; None given: zeros).
    ``pose_corrections`` are per-key track corrections (translations, rotation vectors) in
    the key order of ``tracks`` concatenated, or None when tracks were not refined.
    """

    static: GaussianParams
    actors: GaussianParams
    actor_index: torch.Tensor  # [Na] int32
    tracks: list[ActorTrack]
    sky: torch.Tensor  # [3, H, W] pre-sigmoid
    camera_ids: list[str]
    exposure: torch.Tensor  # [C, 6]
    sh_degree: int = 0
    pose_corrections: tuple[torch.Tensor, torch.Tensor] | None = None  # ([K, 3], [K, 3])
    world_offset_m: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    metadata: dict[str, Any] = field(default_factory=dict)
    vignetting: torch.Tensor | None = None  # [C, 2]

    def __post_init__(self) -> None:
        if self.vignetting is None:
            self.vignetting = torch.zeros(len(self.camera_ids), 2, dtype=self.exposure.dtype,
                                          device=self.exposure.device)

    @property
    def num_gaussians(self) -> int:
        return len(self.static) + len(self.actors)

    @property
    def device(self) -> torch.device:
        return self.static.means.device

    def to(self, device: torch.device | str) -> "Scene":
        """The scene with every tensor on ``device`` (track keys stay float64 on the CPU)."""
        move = lambda t: t.to(device)  # noqa: E731
        corr = None if self.pose_corrections is None else tuple(move(t) for t in self.pose_corrections)
        return dataclasses.replace(self, static=self.static.map(move), actors=self.actors.map(move),
                                   actor_index=move(self.actor_index), sky=move(self.sky),
                                   exposure=move(self.exposure), vignetting=move(self.vignetting),
                                   pose_corrections=corr)

    def detached(self) -> "Scene":
        """A copy with detached, cloned tensors (a checkpoint)."""
        copy = lambda t: t.detach().clone()  # noqa: E731
        corr = None if self.pose_corrections is None else tuple(copy(t) for t in self.pose_corrections)
        return dataclasses.replace(self, static=self.static.map(copy), actors=self.actors.map(copy),
                                   actor_index=copy(self.actor_index), sky=copy(self.sky),
                                   exposure=copy(self.exposure), vignetting=copy(self.vignetting),
                                   pose_corrections=corr)

    def save(self, path: str | Path) -> None:
        """Write ``scene.pt`` (to a temporary name, then moved into place)."""
        path = Path(path)
        s = self.to("cpu").detached()
        payload = {
            "format": "nurec_usd.scene", "version": FORMAT_VERSION,
            "static": s.static.tensors(), "actors": s.actors.tensors(), "actor_index": s.actor_index,
            "tracks": [dataclasses.asdict(t) for t in s.tracks], "sky": s.sky, "camera_ids": s.camera_ids,
            "exposure": s.exposure, "vignetting": s.vignetting, "sh_degree": s.sh_degree,
            "pose_corrections": s.pose_corrections,
            "world_offset_m": list(s.world_offset_m), "metadata": s.metadata,
        }
        # through a file object: a failed write (a full disk) is then an OSError naming the file,
        # where torch's own file writer reports only "unexpected pos"
        with atomic_file(path) as tmp, naming(path), open(tmp, "wb") as f:
            torch.save(payload, f)

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu") -> "Scene":
        """Read a ``scene.pt`` written by :meth:`save`; ValueError naming the file and field if it is not one."""
        path = Path(path)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001 - any unpickling failure means "not a scene file"
            raise ValueError(f"{path}: not a nurec_usd scene file ({err})") from err
        if not isinstance(payload, dict) or payload.get("format") != "nurec_usd.scene":
            raise ValueError(f"{path}: format: not a nurec_usd scene file")
        if payload.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: version: {payload.get('version')} is not supported (expected {FORMAT_VERSION})")
        static = GaussianParams(**payload["static"])
        actors = GaussianParams(**payload["actors"])
        static.check(f"{path}: static")
        actors.check(f"{path}: actors")
        tracks = [ActorTrack(**t) for t in payload["tracks"]]
        index = payload["actor_index"]
        if tuple(index.shape) != (len(actors),) or (len(actors) and not 0 <= int(index.min()) <= int(index.max())
                                                     < len(tracks)):
            raise ValueError(f"{path}: actor_index: expected {len(actors)} track indices in [0, {len(tracks)})")
        if tuple(payload["exposure"].shape) != (len(payload["camera_ids"]), 6):
            raise ValueError(f"{path}: exposure: expected shape ({len(payload['camera_ids'])}, 6), "
                             f"got {tuple(payload['exposure'].shape)}")
        vignetting = payload.get("vignetting")  # absent from files written before it was learned: none
        if vignetting is not None and tuple(vignetting.shape) != (len(payload["camera_ids"]), 2):
            raise ValueError(f"{path}: vignetting: expected shape ({len(payload['camera_ids'])}, 2), "
                             f"got {tuple(vignetting.shape)}")
        if payload["sky"].dim() != 3 or payload["sky"].shape[0] != 3:
            raise ValueError(f"{path}: sky: expected shape (3, H, W), got {tuple(payload['sky'].shape)}")
        corr = payload["pose_corrections"]
        scene = cls(static, actors, payload["actor_index"], tracks, payload["sky"], list(payload["camera_ids"]),
                    payload["exposure"], int(payload["sh_degree"]), None if corr is None else tuple(corr),
                    list(payload["world_offset_m"]), dict(payload["metadata"]), vignetting)
        return scene.to(device)
