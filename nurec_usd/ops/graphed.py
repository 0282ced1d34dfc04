"""Rendering one set of Gaussians from many camera poses by replaying a captured CUDA graph.

Small renders are bound by host time: Python queues some fifteen kernels and allocations per
``render_cameras`` call (``benchmarks/RESULTS.md``, raster-camera). A program that draws the
same Gaussians again and again from new poses (a simulator, RL rollouts, synthetic data)
can capture one forward render in a CUDA graph and replay it: per frame the host copies the
poses and launches the graph. The fixed-capacity binning (no host synchronisation inside a
render) is what makes the render capturable.
"""

from __future__ import annotations

import dataclasses

import torch
import warp as wp

from nurec_usd.ops.camera import CameraBatch, CameraRender, RenderSettings, render_cameras
from nurec_usd.ops.warp_torch import launch, warp_device
from nurec_usd.sensors.se3 import make_transform, quat_to_matrix
from warp_kernels import camera_project as kproj


class GraphedCameraRenderer:
    """Renders fixed Gaussians for a batch of cameras whose poses change from render to render.

    The Gaussians (copied at construction), the cameras' models, intrinsics, shutters and
    resolution, the background and the intersection capacity are fixed; ``render`` takes the
    poses. On CUDA a render replays a captured graph and returns the same output tensors
    every time, holding the latest render: clone what must outlive the next ``render``. On
    the CPU ``render`` calls ``render_cameras`` (fresh tensors each time).

    Overflow is not checked on the host (that would synchronise): ``render(...).overflow``
    says on the device whether the capacity was too small, and ``grow`` re-captures with
    room for the last render's intersections.
    """

    def __init__(
        self,
        means: torch.Tensor,  # [N, 3]
        quats: torch.Tensor,  # [N, 4]
        scales: torch.Tensor,  # [N, 3]
        opacities: torch.Tensor,  # [N]
        colors: torch.Tensor,  # [N, 3] RGB, or [N, K, 3] SH coefficients with sh_degree
        cameras: CameraBatch,  # models, intrinsics, shutters; its poses size the capacity
        sh_degree: int | None = None,
        background: torch.Tensor | None = None,  # [C, 3] or [3]
        near: float = 0.01,
        far: float = 1e4,
        capacity: int | None = None,  # intersections; None: those of ``cameras``' poses x headroom
        headroom: float = 1.5,
        depth: bool = True,  # render the depth image (False: ``render(...).depth`` is None, faster)
    ):
        with torch.no_grad():
            # own copies: the graph reads fixed addresses
            self._gaussians = tuple(t.detach().clone().contiguous() for t in (means, quats, scales, opacities, colors))
            self._background = None if background is None else background.detach().clone()
        self._sh_degree = sh_degree
        self._cameras = cameras.to(means.dtype)
        self._near, self._far, self._headroom, self._depth = float(near), float(far), float(headroom), bool(depth)
        self.device = means.device
        # poses as T_camera_world matrices, start and end of readout; render() writes them
        start = make_transform(quat_to_matrix(self._cameras.rot_start), self._cameras.trans_start)
        end = make_transform(quat_to_matrix(self._cameras.rot_end), self._cameras.trans_end)
        self._T_start, self._T_end = start.contiguous(), end.contiguous()
        if capacity is None:  # one host synchronisation, here
            wanted = int(self._render(self._settings(None)).intersections)
            capacity = int(wanted * self._headroom) + 1
        self.capacity = int(capacity)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._out: CameraRender | None = None
        self._warp_capture = None  # Warp's record of the capture: frees the sort's scratch with it
        self._capture()

    def _settings(self, capacity: int | None) -> RenderSettings:
        return RenderSettings(near=self._near, far=self._far, capacity=capacity, depth=self._depth)

    def _render(self, settings: RenderSettings) -> CameraRender:
        """One forward render at the poses in the pose buffers (device work only: capturable)."""
        c, dtype = len(self._cameras), self._T_start.dtype
        rot_start, trans_start, rot_end, trans_end = (
            torch.empty(c, k, dtype=dtype, device=self.device) for k in (4, 3, 4, 3))
        kernel = kproj.camera_poses_f32 if dtype == torch.float32 else kproj.camera_poses_f64
        launch(kernel, c, [self._T_start, self._T_end], [rot_start, trans_start, rot_end, trans_end],
               device=warp_device(self.device))
        cams = dataclasses.replace(self._cameras, rot_start=rot_start, trans_start=trans_start, rot_end=rot_end,
                                   trans_end=trans_end)
        with torch.no_grad():
            return render_cameras(*self._gaussians, cams, sh_degree=self._sh_degree, background=self._background,
                                  settings=settings)

    def _capture(self) -> None:
        if self.device.type != "cuda":
            return
        settings = self._settings(self.capacity)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm up where the capture runs: kernels loaded, sort scratch sized
            for _ in range(2):
                self._render(settings)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._graph, self._out, self._warp_capture = None, None, None  # the previous graph's memory goes first
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            # Registered with Warp too, so that its radix sort takes scratch memory that the
            # graph owns (an unregistered capture leaks a buffer per capture).
            stream = warp_device(self.device).stream  # torch's current stream: the capturing one
            wp.capture_begin(stream=stream, external=True, capture_mode=wp.CaptureMode.THREAD_LOCAL)
            try:
                out = self._render(settings)
            finally:
                warp_capture = wp.capture_end(stream=stream)
        self._graph, self._out, self._warp_capture = graph, out, warp_capture

    def render(self, T_camera_world_start: torch.Tensor,  # [C, 4, 4]
               T_camera_world_end: torch.Tensor | None = None,  # [C, 4, 4]; None: the start poses
               ) -> CameraRender:
        """Render at these poses (the end of readout matters only to rolling shutters).

        On CUDA the returned tensors are overwritten by the next render. Pass device tensors:
        a host tensor is copied synchronously.
        """
        c = len(self._cameras)
        end = T_camera_world_start if T_camera_world_end is None else T_camera_world_end
        for name, T in (("T_camera_world_start", T_camera_world_start), ("T_camera_world_end", end)):
            if tuple(T.shape) != (c, 4, 4):
                raise ValueError(f"{name} must have shape ({c}, 4, 4) for this renderer's {c} cameras, "
                                 f"got {tuple(T.shape)}")
        self._T_start.copy_(T_camera_world_start)
        self._T_end.copy_(end)
        if self._graph is None:
            return self._render(self._settings(self.capacity))
        self._graph.replay()
        return self._out

    def grow(self, render: CameraRender) -> bool:
        """After ``render.overflow``: make room for its intersections and re-capture (one
        synchronisation). Returns whether the capacity grew; render again afterwards."""
        wanted = int(render.intersections)
        if wanted <= self.capacity:
            return False
        self.capacity = int(wanted * self._headroom) + 1
        self._capture()
        return True
