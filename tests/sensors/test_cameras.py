import math

import cv2
import numpy as np
import pytest
import torch

from nurec_usd.sensors import (
    CameraModel,
    FThetaCamera,
    OpenCVCamera,
    OpenCVFisheyeCamera,
    PinholeCamera,
    camera_model,
)

# Realistic intrinsics with every coefficient non-zero; the images stay inside each model's
# monotonic domain.
SPECS = {
    "pinhole": (1920, 1080, dict(fx=1000.0, fy=1010.0, cx=960.3, cy=540.7)),
    "opencv": (
        1920,
        1080,
        dict(fx=1000.0, fy=1010.0, cx=960.3, cy=540.7, k1=-0.12, k2=0.03, p1=1e-3, p2=-5e-4,
             k3=-0.002, k4=0.01, k5=0.002, k6=0.0005),
    ),
    "opencv_fisheye": (1280, 960, dict(fx=400.0, fy=401.0, cx=640.2, cy=480.1, k1=0.05, k2=-0.01, k3=0.002, k4=-0.0003)),
    "ftheta": (
        1920,
        1280,
        dict(cx=960.5, cy=640.2, angle_to_pixel=[0.0, 500.0, 10.0, -20.0, 2.0, 0.1], max_fov_deg=200.0),
    ),
}
MODELS = list(SPECS)
# Round-trip tolerances: pixels and ray components.
PIX_TOL = {torch.float64: 1e-9, torch.float32: 2e-3}
RAY_TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


def make(model: str, dtype=torch.float64) -> CameraModel:
    w, h, params = SPECS[model]
    return camera_model(model, w, h, params, dtype=dtype)


def pixel_grid(cam: CameraModel, n: int = 41, dtype=torch.float64) -> torch.Tensor:
    # Covers the image area up to 0.01 px from its outer edges (so round-off cannot leave it).
    u = torch.linspace(-0.49, cam.width - 0.51, n, dtype=dtype)
    v = torch.linspace(-0.49, cam.height - 0.51, n, dtype=dtype)
    return torch.stack(torch.meshgrid(u, v, indexing="xy"), dim=-1)  # [n, n, 2]


def directions(max_theta: float, n: int = 2000, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # Uniform in theta (so the edge of the field of view is well covered) and in azimuth.
    theta = torch.rand(n, generator=g, dtype=torch.float64) * max_theta
    phi = torch.rand(n, generator=g, dtype=torch.float64) * 2 * math.pi
    d = torch.stack((torch.sin(theta) * torch.cos(phi), torch.sin(theta) * torch.sin(phi), torch.cos(theta)), dim=-1)
    return d.to(dtype)


def test_factory_types_and_errors():
    assert isinstance(make("pinhole"), PinholeCamera)
    assert isinstance(make("opencv"), OpenCVCamera)
    assert isinstance(make("opencv_fisheye"), OpenCVFisheyeCamera)
    assert isinstance(make("ftheta"), FThetaCamera)
    with pytest.raises(ValueError, match=r"unknown camera model 'kb4'.*ftheta.*opencv.*opencv_fisheye.*pinhole"):
        camera_model("kb4", 10, 10, {})
    with pytest.raises(ValueError, match="'cy'"):
        camera_model("pinhole", 10, 10, dict(fx=1.0, fy=1.0, cx=1.0))
    with pytest.raises(ValueError, match="'p2'"):
        camera_model("opencv", 10, 10, dict(fx=1.0, fy=1.0, cx=1.0, cy=1.0, k1=0.0, k2=0.0, p1=0.0))
    with pytest.raises(ValueError, match="'k4'"):
        camera_model("opencv_fisheye", 10, 10, dict(fx=1.0, fy=1.0, cx=1.0, cy=1.0, k1=0.0, k2=0.0, k3=0.0))
    with pytest.raises(ValueError, match="'max_fov_deg'"):
        camera_model("ftheta", 10, 10, dict(cx=1.0, cy=1.0, angle_to_pixel=[0.0, 1.0]))
    with pytest.raises(ValueError, match="k7"):
        camera_model("pinhole", 10, 10, dict(fx=1.0, fy=1.0, cx=1.0, cy=1.0, k7=0.0))
    with pytest.raises(ValueError, match="'fx'"):
        camera_model("pinhole", 10, 10, dict(fx=-1.0, fy=1.0, cx=1.0, cy=1.0))
    with pytest.raises(ValueError, match="angle_to_pixel"):
        camera_model("ftheta", 10, 10, dict(cx=1.0, cy=1.0, angle_to_pixel=[0.0, -1.0], max_fov_deg=90.0))
    with pytest.raises(ValueError, match="width"):
        camera_model("pinhole", 0, 10, dict(fx=1.0, fy=1.0, cx=1.0, cy=1.0))
    # Optional opencv coefficients default to zero.
    cam = camera_model("opencv", 10, 10, dict(fx=1.0, fy=1.0, cx=1.0, cy=1.0, k1=0.0, k2=0.0, p1=0.0, p2=0.0))
    assert cam.params["k6"] == 0.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("model", MODELS)
def test_pixel_round_trip(model, dtype):
    cam = make(model, dtype)
    uv = pixel_grid(cam, dtype=dtype)
    rays = cam.unproject(uv)
    assert rays.dtype == dtype and rays.shape == (41, 41, 3)
    torch.testing.assert_close(rays.norm(dim=-1), torch.ones(41, 41, dtype=dtype), rtol=0, atol=RAY_TOL[dtype])
    uv2, valid = cam.project(rays * 7.0)
    if model == "ftheta":
        # The 200 deg image circle does not fill the corners; compare pixels inside it only.
        edge = torch.tensor([math.sin(cam.max_theta), 0.0, math.cos(cam.max_theta)], dtype=dtype)
        rho_max = cam.project(edge)[0][0] - cam.params["cx"]
        inside = (uv - torch.tensor([cam.params["cx"], cam.params["cy"]], dtype=dtype)).norm(dim=-1) < rho_max - 1e-3
        assert 0.5 < inside.float().mean() < 1
        uv, uv2, valid = uv[inside], uv2[inside], valid[inside]
    assert valid.all()
    torch.testing.assert_close(uv2, uv, rtol=0, atol=PIX_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("model", MODELS)
def test_point_round_trip(model, dtype):
    cam = make(model, dtype)
    # Cover the model's domain: pinhole/opencv up to 60 deg, fisheye up to 100 deg (behind the
    # image plane), f-theta up to its full 200 deg field of view.
    max_theta = {"pinhole": 1.05, "opencv": 1.05, "opencv_fisheye": math.radians(100), "ftheta": cam.max_theta if model == "ftheta" else 0}[model]
    d = directions(max_theta, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    ranges = (0.5 + 50 * torch.rand(d.shape[0], 1, generator=g, dtype=torch.float64)).to(dtype)
    uv, _ = cam.project(d * ranges)
    rays = cam.unproject(uv)
    torch.testing.assert_close(rays, d, rtol=0, atol=RAY_TOL[dtype] * (1 if model in ("pinhole", "opencv") else 10))
    if model in ("opencv_fisheye", "ftheta"):
        assert (d[:, 2] < 0).any()  # the sample really includes points behind the camera


def test_opencv_matches_cv2_project_points():
    cam = make("opencv")
    p = SPECS["opencv"][2]
    K = np.array([[p["fx"], 0, p["cx"]], [0, p["fy"], p["cy"]], [0, 0, 1]])
    D = np.array([p[k] for k in ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6")])
    pts = directions(1.0, n=500, seed=2).numpy() * 3.0
    ref, _ = cv2.projectPoints(pts, np.zeros(3), np.zeros(3), K, D)
    uv, valid = cam.project(torch.from_numpy(pts))
    assert valid.any()
    np.testing.assert_allclose(uv.numpy(), ref[:, 0], rtol=0, atol=1e-9)
    # Unprojection against cv2.undistortPoints (run to convergence) for in-image pixels.
    pix = pixel_grid(cam, 15).reshape(-1, 2)
    und = cv2.undistortPoints(
        pix.numpy()[:, None], K, D, criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-15)
    )[:, 0]
    rays = cam.unproject(pix)
    np.testing.assert_allclose((rays[:, :2] / rays[:, 2:]).numpy(), und, rtol=0, atol=1e-9)


def test_fisheye_matches_cv2_fisheye():
    cam = make("opencv_fisheye")
    p = SPECS["opencv_fisheye"][2]
    K = np.array([[p["fx"], 0, p["cx"]], [0, p["fy"], p["cy"]], [0, 0, 1]])
    D = np.array([p["k1"], p["k2"], p["k3"], p["k4"]])
    # cv2.fisheye works on x/z, so only points in front of the camera (here up to 80 deg).
    pts = directions(math.radians(80), n=500, seed=3).numpy() * 2.0
    ref, _ = cv2.fisheye.projectPoints(pts[:, None], np.zeros(3), np.zeros(3), K, D)
    uv, _ = cam.project(torch.from_numpy(pts))
    np.testing.assert_allclose(uv.numpy(), ref[:, 0], rtol=0, atol=1e-9)
    pix = (ref[:, 0] + 0.0).astype(np.float64)
    und = cv2.fisheye.undistortPoints(
        pix[:, None], K, D, criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-15)
    )[:, 0]
    rays = cam.unproject(torch.from_numpy(pix))
    np.testing.assert_allclose((rays[:, :2] / rays[:, 2:]).numpy(), und, rtol=1e-8, atol=1e-8)


def test_hand_computed_values():
    # Pinhole: (1, 2, 4) -> u = 100 * 1/4 + 50 = 75, v = 200 * 2/4 + 40 = 140.
    cam = camera_model("pinhole", 200, 200, dict(fx=100.0, fy=200.0, cx=50.0, cy=40.0), dtype=torch.float64)
    uv, valid = cam.project(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))
    assert uv.tolist() == [75.0, 140.0] and bool(valid)

    # OpenCV: (1, 0, 2) -> x' = 0.5, y' = 0, r^2 = 0.25; radial = (1 + 0.1 * 0.25) / (1 + 0.2 * 0.25)
    # = 1.025 / 1.05; x'' = 0.5 * 1.025 / 1.05; y'' = p1 * r^2 = 0.01 * 0.25 = 0.0025.
    params = dict(fx=100.0, fy=100.0, cx=320.0, cy=240.0, k1=0.1, k2=0.0, p1=0.01, p2=0.0, k4=0.2)
    cam = camera_model("opencv", 640, 480, params, dtype=torch.float64)
    uv, valid = cam.project(torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(uv, torch.tensor([320 + 100 * 0.5 * 1.025 / 1.05, 240 + 100 * 0.0025], dtype=torch.float64))
    assert bool(valid)

    # Fisheye: (1, 0, 1) -> r = 1, theta = pi/4, theta_d = pi/4 (1 + 0.1 (pi/4)^2), u = fx theta_d + cx.
    params = dict(fx=300.0, fy=300.0, cx=320.0, cy=240.0, k1=0.1, k2=0.0, k3=0.0, k4=0.0)
    cam = camera_model("opencv_fisheye", 640, 480, params, dtype=torch.float64)
    uv, _ = cam.project(torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
    th = math.pi / 4
    torch.testing.assert_close(uv, torch.tensor([320 + 300 * th * (1 + 0.1 * th**2), 240.0], dtype=torch.float64))

    # F-theta: (0, 1, 0) is 90 deg off axis, straight down: rho = 300 (pi/2) + 10 (pi/2)^3, u = cx.
    params = dict(cx=500.0, cy=400.0, angle_to_pixel=[0.0, 300.0, 0.0, 10.0], max_fov_deg=200.0)
    cam = camera_model("ftheta", 1000, 1400, params, dtype=torch.float64)
    uv, valid = cam.project(torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(uv, torch.tensor([500.0, 400 + 300 * math.pi / 2 + 10 * (math.pi / 2) ** 3], dtype=torch.float64))
    assert bool(valid)


def test_validity_masks():
    pin, ocv, fish, ft = (make(m) for m in MODELS)
    behind = torch.tensor([[0.1, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1e-9]], dtype=torch.float64)
    for cam in (pin, ocv):
        uv, valid = cam.project(behind)
        assert not valid.any() and torch.isfinite(uv).all()
    # Fisheye: 100 deg off axis (behind the image plane) is valid when it lands on the image.
    p = torch.tensor([math.sin(math.radians(100)), 0.0, math.cos(math.radians(100))], dtype=torch.float64)
    assert fish.max_theta > math.radians(100)
    wide = camera_model("opencv_fisheye", 4000, 4000, dict(SPECS["opencv_fisheye"][2], cx=2000.0, cy=2000.0))
    assert bool(wide.project(p)[1])
    # Beyond the fisheye's monotonic angle: invalid.
    q = torch.tensor([math.sin(fish.max_theta + 0.01), 0.0, math.cos(fish.max_theta + 0.01)], dtype=torch.float64)
    assert not bool(wide.project(q)[1])
    # F-theta: 99 deg valid, 101 deg invalid for a 200 deg field of view; exactly behind invalid.
    angles = torch.tensor([math.radians(99), math.radians(101), math.pi], dtype=torch.float64)
    pts = torch.stack((torch.zeros(3, dtype=torch.float64), torch.sin(angles), torch.cos(angles)), dim=-1)
    big = camera_model("ftheta", 4000, 4000, dict(SPECS["ftheta"][2], cx=2000.0, cy=2000.0))
    assert big.project(pts)[1].tolist() == [True, False, False]
    # Image bounds are the pixel areas: [-0.5, width - 0.5) x [-0.5, height - 0.5).
    uv = torch.tensor([[-0.5, -0.5], [1919.49, 1079.49], [1919.5, 0.0], [0.0, 1079.5], [-0.51, 0.0]], dtype=torch.float64)
    assert pin.in_image(uv).tolist() == [True, True, False, False, False]


def test_opencv_fold_over_is_invalid():
    # Strong barrel distortion folds back beyond max_r; points there must not count as valid.
    params = dict(fx=500.0, fy=500.0, cx=320.0, cy=240.0, k1=-0.4, k2=0.0, p1=0.0, p2=0.0)
    cam = camera_model("opencv", 640, 480, params, dtype=torch.float64)
    # d(r (1 + k1 r^2))/dr = 1 + 3 k1 r^2 = 0 at r = 1/sqrt(1.2).
    assert abs(cam.max_r - 1 / math.sqrt(1.2)) < 1e-3
    # r = 1.6: x'' = 1.6 (1 - 0.4 * 1.6^2) = -0.0384, folded back next to the centre.
    far = torch.tensor([1.6, 0.0, 1.0], dtype=torch.float64)
    uv, valid = cam.project(far)
    assert cam.in_image(uv) and not bool(valid)
    # Unprojecting a pixel that no ray reaches stays finite.
    assert torch.isfinite(cam.unproject(torch.tensor([0.0, 0.0], dtype=torch.float64))).all()


@pytest.mark.parametrize("model", MODELS)
def test_on_axis_points_and_pixels(model):
    cam = make(model)
    p = torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    uv, valid = cam.project(p)
    assert bool(valid)
    (g,) = torch.autograd.grad(uv.sum(), p)
    assert torch.isfinite(g).all()
    c = torch.tensor([cam.params["cx"], cam.params["cy"]], dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(uv.detach(), c.detach())
    ray = cam.unproject(c)
    torch.testing.assert_close(ray.detach(), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    (g,) = torch.autograd.grad(ray.sum(), c)
    assert torch.isfinite(g).all()


@pytest.mark.parametrize("model", MODELS)
def test_gradcheck_project_and_unproject(model):
    cam = make(model)
    pts = torch.tensor(
        [[0.3, -0.2, 2.0], [-1.0, 0.5, 1.5], [0.0, 0.0, 3.0], [1e-12, 0.0, 1.0]], dtype=torch.float64
    )
    if model in ("opencv_fisheye", "ftheta"):
        pts = torch.cat((pts, torch.tensor([[1.0, 0.4, -0.1]], dtype=torch.float64)))  # > 90 deg
    pts.requires_grad_()
    assert torch.autograd.gradcheck(lambda p: cam.project(p)[0], (pts,))
    uv = torch.tensor(
        [[100.0, 50.0], [cam.params["cx"], cam.params["cy"]], [cam.width - 10.0, cam.height / 2], [600.0, 900.0]],
        dtype=torch.float64,
        requires_grad=True,
    )
    assert torch.autograd.gradcheck(cam.unproject, (uv,))


def test_dtype_follows_inputs():
    cam = make("opencv_fisheye", torch.float32)
    p = torch.tensor([[0.1, 0.2, 1.0]], dtype=torch.float64)
    uv, _ = cam.project(p)
    assert uv.dtype == torch.float64
    assert cam.unproject(uv).dtype == torch.float64
    assert cam.project(p.float())[0].dtype == torch.float32
