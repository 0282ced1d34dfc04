"""Camera models: projection of camera-frame points to pixels and unprojection of pixels to rays.

Conventions:
  * Camera frame is OpenCV's: x right, y down, z forward.
  * Pixels follow OpenCV: the centre of the top-left pixel is (0, 0); u is the column, v the row.
    A pixel therefore covers [u - 0.5, u + 0.5), and the image covers
    ``-0.5 <= u < width - 0.5`` and ``-0.5 <= v < height - 0.5`` (see :meth:`CameraModel.in_image`).
  * All math is torch, batched over leading dimensions, differentiable, and follows the dtype and
    device of its inputs. Distortion is inverted with a fixed number of unrolled Newton steps, so
    unprojection never synchronises with the device.

Models and their ``params`` (names as in the capture manifest):
  * ``"pinhole"``: fx, fy, cx, cy
  * ``"opencv"``: fx, fy, cx, cy, k1, k2, p1, p2 and optional k3, k4, k5, k6 (rational model)
  * ``"opencv_fisheye"``: fx, fy, cx, cy, k1, k2, k3, k4 (Kannala-Brandt as in cv2.fisheye)
  * ``"ftheta"``: cx, cy, angle_to_pixel (c0..c5), max_fov_deg
"""

from __future__ import annotations

import math
import numbers
from typing import Mapping, Sequence

import torch

__all__ = [
    "CameraModel",
    "PinholeCamera",
    "OpenCVCamera",
    "OpenCVFisheyeCamera",
    "FThetaCamera",
    "CAMERA_MODELS",
    "camera_model",
]

# Points closer than this to the z = 0 plane are not projected by pinhole/opencv models.
MIN_DEPTH = 1e-6
# Below (r / z)^2 of this, fisheye/f-theta use the on-axis limit of rho / r (exact to ~1e-20).
_ON_AXIS_REL_SQ = 1e-20
# Below this squared radius (normalised units or pixels), unprojection uses the on-axis limit.
_ON_AXIS_SQ = 1e-20
# Samples of the lookup table that seeds the 1D Newton solves of fisheye/f-theta unprojection.
_TABLE_SIZE = 512


class CameraModel:
    """Base class of camera models; build instances with :func:`camera_model`.

    Attributes:
        model: model name ("pinhole", "opencv", "opencv_fisheye" or "ftheta").
        width, height: image size in pixels.
        params: the intrinsics as plain Python numbers (optional ones filled with defaults).
    """

    model: str = ""
    _required: tuple[str, ...] = ()
    _optional: Mapping[str, float] = {}

    def __init__(
        self,
        width: int,
        height: int,
        params: Mapping[str, object],
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"width must be a positive int, got {width!r}")
        if isinstance(height, bool) or not isinstance(height, int) or height < 1:
            raise ValueError(f"height must be a positive int, got {height!r}")
        self.width = width
        self.height = height
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.params = self._parse_params(params)
        self._tensors: dict[str, torch.Tensor] = {}

    # -- parameters -------------------------------------------------------------------------

    def _parse_params(self, params: Mapping[str, object]) -> dict:
        known = set(self._required) | set(self._optional)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(
                f"{self.model} camera: unknown param(s) {unknown}; expected {sorted(known)}"
            )
        out: dict = {}
        for name in self._required:
            if name not in params:
                raise ValueError(f"{self.model} camera: missing param {name!r}")
            out[name] = params[name]
        for name, default in self._optional.items():
            out[name] = params.get(name, default)
        for name, value in out.items():
            if not isinstance(value, (numbers.Real, str)) and hasattr(value, "__iter__"):
                out[name] = list(value)  # polynomial coefficients; checked by the model
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"{self.model} camera: param {name!r} must be a finite number, got {value!r}")
            out[name] = float(value)
        for name in ("fx", "fy"):
            if name in out and out[name] <= 0:
                raise ValueError(f"{self.model} camera: param {name!r} must be > 0, got {out[name]}")
        return out

    def _register(self, name: str, value: float | Sequence[float] | torch.Tensor) -> None:
        # Intrinsics live as tensors (so they could be optimised) in the camera's dtype/device.
        self._tensors[name] = torch.as_tensor(value, dtype=self.dtype, device=self.device)

    def _p(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        # Intrinsics cast to the input's dtype/device (a no-op when they already match).
        return {k: v.to(dtype=like.dtype, device=like.device) for k, v in self._tensors.items()}

    # -- public API -------------------------------------------------------------------------

    def in_image(self, uv: torch.Tensor) -> torch.Tensor:
        """Whether pixel coordinates fall on the image.

        A pixel centred at integer (u, v) covers [u - 0.5, u + 0.5) x [v - 0.5, v + 0.5), so the
        image area is ``-0.5 <= u < width - 0.5`` and ``-0.5 <= v < height - 0.5``.

        Args:
            uv: pixel coordinates (u = column, v = row).  # [..., 2]

        Returns:
            Boolean mask.  # [...]
        """
        u, v = uv[..., 0], uv[..., 1]
        return (u >= -0.5) & (u < self.width - 0.5) & (v >= -0.5) & (v < self.height - 0.5)

    def project(self, points_cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Project camera-frame points to pixels.

        Args:
            points_cam: points in the camera frame (OpenCV axes), metres.  # [..., 3]

        Returns:
            uv: pixel coordinates; finite everywhere, meaningless where not valid.  # [..., 2]
            valid: inside the model's domain (see the subclass) and on the image.  # [...]
        """
        uv, in_domain = self._project(points_cam)
        return uv, in_domain & self.in_image(uv)

    def unproject(self, uv: torch.Tensor) -> torch.Tensor:
        """Unit ray directions in the camera frame through pixel coordinates.

        Args:
            uv: pixel coordinates (u = column, v = row).  # [..., 2]

        Returns:
            Unit-length ray directions.  # [..., 3]
        """
        raise NotImplementedError

    def _project(self, points_cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(width={self.width}, height={self.height}, params={self.params})"


def _safe_front_depth(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Points behind the camera get a dummy depth so values and gradients stay finite.
    front = z > MIN_DEPTH
    return front, torch.where(front, z, torch.ones_like(z))


def _unit_ray(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    ray = torch.stack((x, y, z), dim=-1)
    return ray / torch.linalg.vector_norm(ray, dim=-1, keepdim=True)


class PinholeCamera(CameraModel):
    """Ideal pinhole: ``u = fx x / z + cx``, ``v = fy y / z + cy``; valid for z > MIN_DEPTH."""

    model = "pinhole"
    _required = ("fx", "fy", "cx", "cy")

    def __init__(self, width, height, params, dtype=torch.float32, device=None) -> None:
        super().__init__(width, height, params, dtype, device)
        for name in self._required:
            self._register(name, self.params[name])

    def _project(self, points_cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        P = self._p(points_cam)
        x, y, z = points_cam.unbind(-1)
        front, z = _safe_front_depth(z)
        uv = torch.stack((P["fx"] * x / z + P["cx"], P["fy"] * y / z + P["cy"]), dim=-1)
        return uv, front

    def unproject(self, uv: torch.Tensor) -> torch.Tensor:
        P = self._p(uv)
        x = (uv[..., 0] - P["cx"]) / P["fx"]
        y = (uv[..., 1] - P["cy"]) / P["fy"]
        return _unit_ray(x, y, torch.ones_like(x))


class OpenCVCamera(CameraModel):
    """OpenCV's radial-tangential rational model (``cv2.projectPoints`` with 8 coefficients).

    With x' = x/z, y' = y/z, r^2 = x'^2 + y'^2:
    ``radial = (1 + k1 r^2 + k2 r^4 + k3 r^6) / (1 + k4 r^2 + k5 r^4 + k6 r^6)``,
    ``x'' = x' radial + 2 p1 x' y' + p2 (r^2 + 2 x'^2)``,
    ``y'' = y' radial + p1 (r^2 + 2 y'^2) + 2 p2 x' y'``, ``u = fx x'' + cx``, ``v = fy y'' + cy``.

    Valid points have z > MIN_DEPTH and r below ``max_r``, the first radius where the radial map
    r -> r * radial(r^2) stops increasing (tangential terms ignored there); beyond it the
    polynomial folds back and would place far off-axis points inside the image.
    """

    model = "opencv"
    _required = ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2")
    _optional = {"k3": 0.0, "k4": 0.0, "k5": 0.0, "k6": 0.0}
    #: Newton steps of :meth:`unproject`; each squares the error once close to the solution.
    newton_iterations = 10

    def __init__(self, width, height, params, dtype=torch.float32, device=None) -> None:
        super().__init__(width, height, params, dtype, device)
        for name in self._required + tuple(self._optional):
            self._register(name, self.params[name])
        self.max_r = self._monotonic_radius()

    def _monotonic_radius(self, r_scan: float = 50.0, samples: int = 50001) -> float:
        # Host-side scan at construction: first radius where d(r radial)/dr <= 0 or the rational
        # denominator reaches 0. r = 50 is ~88.9 degrees off axis.
        p = self.params
        r = torch.linspace(0.0, r_scan, samples, dtype=torch.float64)
        r2 = r * r
        num = 1 + r2 * (p["k1"] + r2 * (p["k2"] + r2 * p["k3"]))
        den = 1 + r2 * (p["k4"] + r2 * (p["k5"] + r2 * p["k6"]))
        dnum = p["k1"] + r2 * (2 * p["k2"] + r2 * 3 * p["k3"])
        dden = p["k4"] + r2 * (2 * p["k5"] + r2 * 3 * p["k6"])
        radial = num / den
        slope = radial + 2 * r2 * (dnum * den - num * dden) / (den * den)
        bad = (slope <= 0) | (den <= 0)
        if not bool(bad.any()):
            return math.inf
        first = int(torch.nonzero(bad)[0, 0])
        if first == 0:
            raise ValueError("opencv camera: the distortion is not increasing at the image centre")
        return float(r[first - 1])

    @staticmethod
    def _distort(
        x: torch.Tensor, y: torch.Tensor, P: dict[str, torch.Tensor], jacobian: bool = False
    ) -> tuple[torch.Tensor, ...]:
        r2 = x * x + y * y
        num = 1 + r2 * (P["k1"] + r2 * (P["k2"] + r2 * P["k3"]))
        den = 1 + r2 * (P["k4"] + r2 * (P["k5"] + r2 * P["k6"]))
        radial = num / den
        xy = x * y
        xd = x * radial + 2 * P["p1"] * xy + P["p2"] * (r2 + 2 * x * x)
        yd = y * radial + P["p1"] * (r2 + 2 * y * y) + 2 * P["p2"] * xy
        if not jacobian:
            return xd, yd
        dnum = P["k1"] + r2 * (2 * P["k2"] + r2 * 3 * P["k3"])
        dden = P["k4"] + r2 * (2 * P["k5"] + r2 * 3 * P["k6"])
        dradial = (dnum * den - num * dden) / (den * den)  # d radial / d r^2
        # The Jacobian is symmetric: d xd/dy == d yd/dx.
        j_xx = radial + 2 * x * x * dradial + 2 * P["p1"] * y + 6 * P["p2"] * x
        j_xy = 2 * xy * dradial + 2 * P["p1"] * x + 2 * P["p2"] * y
        j_yy = radial + 2 * y * y * dradial + 6 * P["p1"] * y + 2 * P["p2"] * x
        return xd, yd, j_xx, j_xy, j_yy

    def _project(self, points_cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        P = self._p(points_cam)
        x, y, z = points_cam.unbind(-1)
        front, z = _safe_front_depth(z)
        xn, yn = x / z, y / z
        xd, yd = self._distort(xn, yn, P)
        uv = torch.stack((P["fx"] * xd + P["cx"], P["fy"] * yd + P["cy"]), dim=-1)
        in_domain = front & (xn * xn + yn * yn < self.max_r**2)
        return uv, in_domain

    def unproject(self, uv: torch.Tensor) -> torch.Tensor:
        P = self._p(uv)
        xd = (uv[..., 0] - P["cx"]) / P["fx"]
        yd = (uv[..., 1] - P["cy"]) / P["fy"]
        # Newton on the 2D map distort(x, y) = (xd, yd), starting from the distorted point.
        x, y = xd, yd
        tiny = torch.finfo(uv.dtype).tiny ** 0.5
        for _ in range(self.newton_iterations):
            fx_, fy_, j_xx, j_xy, j_yy = self._distort(x, y, P, jacobian=True)
            ex, ey = fx_ - xd, fy_ - yd
            det = j_xx * j_yy - j_xy * j_xy
            # Keep a degenerate Jacobian from dividing by zero (only outside the valid domain).
            det = torch.where(det.abs() < tiny, torch.full_like(det, tiny), det)
            x = x - (j_yy * ex - j_xy * ey) / det
            y = y - (j_xx * ey - j_xy * ex) / det
            if math.isfinite(self.max_r):
                # Pixels beyond the distortion's reach have no solution; pull the iterate back to
                # the monotonic radius so it stays bounded instead of diverging.
                r_sq = x * x + y * y
                shrink = torch.where(
                    r_sq > self.max_r**2, self.max_r / torch.sqrt(r_sq.clamp_min(self.max_r**2)), torch.ones_like(r_sq)
                )
                x, y = x * shrink, y * shrink
        return _unit_ray(x, y, torch.ones_like(x))


class _RadialAngleCamera(CameraModel):
    """Shared code of models mapping the angle theta from +z to a radial image distance."""

    #: Newton steps of the 1D inversion in :meth:`unproject` (seeded from a lookup table).
    newton_iterations = 6
    # Largest valid theta (radians); set by subclasses.
    max_theta: float = math.pi

    def _radial(self, theta: torch.Tensor, P: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Radial distance of theta and its derivative (subclass-specific units)."""
        raise NotImplementedError

    def _radial_host(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        P = {k: v.to(dtype=torch.float64, device="cpu") for k, v in self._tensors.items()}
        return self._radial(theta, P)

    def _monotonic_theta(self, samples: int = 100001) -> float:
        # Host-side scan at construction: largest theta in [0, pi] before the radial polynomial
        # stops increasing (its inverse, hence unprojection, is only defined up to there).
        theta = torch.linspace(0.0, math.pi, samples, dtype=torch.float64)
        _, slope = self._radial_host(theta)
        bad = slope[1:] <= 0
        if not bool(bad.any()):
            return math.pi
        first = int(torch.nonzero(bad)[0, 0]) + 1
        if first == 1:
            raise ValueError(f"{self.model} camera: the distortion polynomial is not increasing at theta = 0")
        return float(theta[first - 1])

    def _build_table(self) -> None:
        # Lookup table theta -> radial distance, used to seed Newton so that it converges in a few
        # steps for any monotonic polynomial.
        theta = torch.linspace(0.0, self.max_theta, _TABLE_SIZE, dtype=torch.float64)
        radial, _ = self._radial_host(theta)
        self._register("table_theta", theta)
        self._register("table_radial", radial)

    def _theta_of_radial(self, target: torch.Tensor, P: dict[str, torch.Tensor]) -> torch.Tensor:
        """theta with radial(theta) == target, clamped to [0, max_theta]."""
        tt, tr = P["table_theta"], P["table_radial"]
        n = tt.shape[0]
        i1 = torch.searchsorted(tr, target.detach().contiguous()).clamp(1, n - 1)
        i0 = i1 - 1
        w = ((target - tr[i0]) / (tr[i1] - tr[i0])).clamp(0.0, 1.0)
        theta = tt[i0] + w * (tt[i1] - tt[i0])
        tiny = torch.finfo(target.dtype).eps
        for _ in range(self.newton_iterations):
            value, slope = self._radial(theta, P)
            theta = (theta - (value - target) / slope.clamp_min(tiny)).clamp(0.0, self.max_theta)
        return theta

    def _theta_and_direction(self, points_cam: torch.Tensor):
        """theta from the axis, the in-plane direction scale 1/r, and an on-axis mask."""
        x, y, z = points_cam.unbind(-1)
        r_sq = x * x + y * y
        on_axis = (r_sq <= _ON_AXIS_REL_SQ * z * z) & (z > 0)
        # Dummy radius where r == 0 or on axis, so sqrt/atan2 and their gradients stay finite.
        dummy = on_axis | (r_sq == 0)
        r = torch.sqrt(torch.where(dummy, torch.ones_like(r_sq), r_sq))
        theta = torch.atan2(r, z)
        # Exactly on the axis behind the camera (or at the origin) theta is pi: outside any domain.
        theta = torch.where(on_axis, torch.zeros_like(theta), theta)
        theta = torch.where(dummy & ~on_axis, torch.full_like(theta, math.pi), theta)
        z_axis = torch.where(on_axis, z, torch.ones_like(z))
        return x, y, r, theta, on_axis, z_axis


class OpenCVFisheyeCamera(_RadialAngleCamera):
    """OpenCV's fisheye (Kannala-Brandt) model as in ``cv2.fisheye``, extended behind the camera.

    theta = atan2(r, z) with r = sqrt(x^2 + y^2);
    theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8);
    ``u = fx (theta_d / r) x + cx``, ``v = fy (theta_d / r) y + cy``.

    Valid points have theta < ``max_theta``: pi, or less where theta_d(theta) stops increasing.
    """

    model = "opencv_fisheye"
    _required = ("fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4")

    def __init__(self, width, height, params, dtype=torch.float32, device=None) -> None:
        super().__init__(width, height, params, dtype, device)
        for name in self._required:
            self._register(name, self.params[name])
        self.max_theta = self._monotonic_theta()
        self._build_table()

    def _radial(self, theta, P):
        t2 = theta * theta
        poly = 1 + t2 * (P["k1"] + t2 * (P["k2"] + t2 * (P["k3"] + t2 * P["k4"])))
        dpoly = 1 + t2 * (3 * P["k1"] + t2 * (5 * P["k2"] + t2 * (7 * P["k3"] + t2 * 9 * P["k4"])))
        return theta * poly, dpoly

    def _project(self, points_cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        P = self._p(points_cam)
        x, y, r, theta, on_axis, z_axis = self._theta_and_direction(points_cam)
        theta_d, _ = self._radial(theta, P)
        # theta_d / r -> 1 / z on the axis (relative error ~ (r/z)^2 <= 1e-20 there).
        scale = torch.where(on_axis, 1.0 / z_axis, theta_d / r)
        uv = torch.stack((P["fx"] * scale * x + P["cx"], P["fy"] * scale * y + P["cy"]), dim=-1)
        return uv, theta < self.max_theta

    def unproject(self, uv: torch.Tensor) -> torch.Tensor:
        P = self._p(uv)
        mx = (uv[..., 0] - P["cx"]) / P["fx"]
        my = (uv[..., 1] - P["cy"]) / P["fy"]
        rd_sq = mx * mx + my * my
        on_axis = rd_sq <= _ON_AXIS_SQ
        theta_d = torch.sqrt(torch.where(on_axis, torch.ones_like(rd_sq), rd_sq))
        theta = self._theta_of_radial(theta_d, P)
        # sin(theta) / theta_d -> 1 on the axis (theta_d' = 1 at 0).
        s = torch.where(on_axis, torch.ones_like(theta), torch.sin(theta) / theta_d)
        c = torch.where(on_axis, torch.ones_like(theta), torch.cos(theta))
        return _unit_ray(s * mx, s * my, c)


class FThetaCamera(_RadialAngleCamera):
    """NVIDIA-style f-theta model: radial pixel distance rho = sum_i c_i theta^i (i <= 5).

    ``u = cx + rho x / r``, ``v = cy + rho y / r`` with theta = atan2(r, z), r = sqrt(x^2 + y^2).
    Valid points have 2 theta <= max_fov_deg and theta below the first angle where rho stops
    increasing. ``angle_to_pixel`` needs c1 > 0; a non-zero c0 makes the axis a singular point
    (it maps to the centre (cx, cy)).
    """

    model = "ftheta"
    _required = ("cx", "cy", "angle_to_pixel", "max_fov_deg")

    def __init__(self, width, height, params, dtype=torch.float32, device=None) -> None:
        super().__init__(width, height, params, dtype, device)
        coeffs = self.params["angle_to_pixel"]
        if (
            not isinstance(coeffs, list)
            or not 2 <= len(coeffs) <= 6
            or not all(isinstance(c, numbers.Real) and not isinstance(c, bool) and math.isfinite(c) for c in coeffs)
        ):
            raise ValueError(f"ftheta camera: param 'angle_to_pixel' must be 2 to 6 finite numbers, got {coeffs!r}")
        if coeffs[1] <= 0:
            raise ValueError(f"ftheta camera: param 'angle_to_pixel' needs c1 > 0, got {coeffs[1]}")
        fov = self.params["max_fov_deg"]
        if isinstance(fov, list) or not 0 < fov <= 360:
            raise ValueError(f"ftheta camera: param 'max_fov_deg' must be in (0, 360], got {fov!r}")
        self.params["angle_to_pixel"] = [float(c) for c in coeffs]
        self._register("cx", self.params["cx"])
        self._register("cy", self.params["cy"])
        self._register("coeffs", self.params["angle_to_pixel"])
        self.max_theta = min(math.radians(fov) / 2, self._monotonic_theta())
        self._build_table()

    def _radial(self, theta, P):
        c = P["coeffs"].unbind(0)
        # Horner for rho and d rho / d theta.
        rho = torch.zeros_like(theta) + c[-1]
        drho = torch.zeros_like(theta)
        for ci in reversed(c[:-1]):
            drho = drho * theta + rho
            rho = rho * theta + ci
        return rho, drho

    def _project(self, points_cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        P = self._p(points_cam)
        c0, c1 = P["coeffs"][0], P["coeffs"][1]
        x, y, r, theta, on_axis, z_axis = self._theta_and_direction(points_cam)
        rho, _ = self._radial(theta, P)
        # (rho - c0) / r -> c1 / z on the axis; the constant c0 is applied along x / r separately.
        scale = torch.where(on_axis, c1 / z_axis, (rho - c0) / r)
        u = P["cx"] + scale * x + c0 * x / r
        v = P["cy"] + scale * y + c0 * y / r
        return torch.stack((u, v), dim=-1), theta <= self.max_theta

    def unproject(self, uv: torch.Tensor) -> torch.Tensor:
        P = self._p(uv)
        c1 = P["coeffs"][1]
        du = uv[..., 0] - P["cx"]
        dv = uv[..., 1] - P["cy"]
        rho_sq = du * du + dv * dv
        on_axis = rho_sq <= _ON_AXIS_SQ
        rho = torch.sqrt(torch.where(on_axis, torch.ones_like(rho_sq), rho_sq))
        theta = self._theta_of_radial(rho, P)
        # sin(theta) / rho -> 1 / c1 on the axis.
        s = torch.where(on_axis, (1.0 / c1).expand_as(theta), torch.sin(theta) / rho)
        c = torch.where(on_axis, torch.ones_like(theta), torch.cos(theta))
        return _unit_ray(s * du, s * dv, c)


CAMERA_MODELS: dict[str, type[CameraModel]] = {
    cls.model: cls for cls in (PinholeCamera, OpenCVCamera, OpenCVFisheyeCamera, FThetaCamera)
}


def camera_model(
    model: str,
    width: int,
    height: int,
    params: Mapping[str, object],
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> CameraModel:
    """Build a camera model from its manifest description.

    Args:
        model: "pinhole", "opencv", "opencv_fisheye" or "ftheta".
        width, height: image size in pixels.
        params: intrinsics by name (see the module docstring).
        dtype, device: where the intrinsics tensors live; inputs of other dtypes/devices still
            work (the intrinsics are cast to them).

    Raises:
        ValueError: unknown model, missing/unknown/invalid params.
    """
    cls = CAMERA_MODELS.get(model)
    if cls is None:
        raise ValueError(f"unknown camera model {model!r}; known models: {sorted(CAMERA_MODELS)}")
    return cls(width, height, dict(params), dtype=dtype, device=device)
