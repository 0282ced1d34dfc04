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

from nurec_usd.render.camera import CameraBatch, CameraRender, RenderSettings, render_cameras
from nurec_usd.sensors.se3 import make_transform, matrix_to_quat, quat_to_matrix


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
    ):
        with torch.no_grad():
            # own copies: the graph reads fixed addresses
            self._gaussians = tuple(t.detach().clone().contiguous() for t in (means, quats, scales, opacities, colors))
            self._background = None if background is None else background.detach().clone()
        self._sh_degree = sh_degree
        self._cameras = cameras.to(means.dtype)
        self._near, self._far, self._headroom = float(near), float(far), float(headroom)
        self.device = means.device
        # poses as T_camera_world matrices, start and end of readout; render() writes them
        start = make_transform(quat_to_matrix(self._cameras.rot_start), self._cameras.trans_start)
        end = make_transform(quat_to_matrix(self._cameras.rot_end), self._cameras.trans_end)
        self._T_start, self._T_end = start.contiguous(), end.contiguous()
        if capacity is None:  # one host synchronisation, here
            wanted = int(self._render(RenderSettings(near=self._near, far=self._far)).intersections)
            capacity = int(wanted * self._headroom) + 1
        self.capacity = int(capacity)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._out: CameraRender | None = None
        self._capture()

    def _render(self, settings: RenderSettings) -> CameraRender:
        """One forward render at the poses in the pose buffers (device ops only: capturable)."""
        q0 = matrix_to_quat(self._T_start[:, :3, :3])
        q1 = matrix_to_quat(self._T_end[:, :3, :3])
        q1 = torch.where((q0 * q1).sum(-1, keepdim=True) < 0, -q1, q1)
        cams = dataclasses.replace(self._cameras, rot_start=q0, trans_start=self._T_start[:, :3, 3].contiguous(),
                                   rot_end=q1, trans_end=self._T_end[:, :3, 3].contiguous())
        with torch.no_grad():
            return render_cameras(*self._gaussians, cams, sh_degree=self._sh_degree, background=self._background,
                                  settings=settings)

    def _capture(self) -> None:
        if self.device.type != "cuda":
            return
        settings = RenderSettings(near=self._near, far=self._far, capacity=self.capacity)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm up where the capture runs: kernels loaded, sort scratch sized
            for _ in range(2):
                self._render(settings)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._graph, self._out = None, None  # the previous graph's memory goes back first
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out = self._render(settings)
        self._graph, self._out = graph, out

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
            return self._render(RenderSettings(near=self._near, far=self._far, capacity=self.capacity))
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
