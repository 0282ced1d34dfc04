"""The helpers the importers share: rigid inverses, ids and labels in the capture format's rules."""

import re

import numpy as np

from nurec_usd.capture.importers.common import invert_rigid, label, sensor_id

ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # the sensor ids' pattern of schemas/capture.schema.json


def test_invert_rigid_is_the_inverse():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    T = np.eye(4)
    T[:3, :3] = q * np.sign(np.linalg.det(q))
    T[:3, 3] = rng.normal(size=3) * 10
    np.testing.assert_allclose(invert_rigid(T) @ T, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(invert_rigid(T), np.linalg.inv(T), atol=1e-12)


def test_sensor_ids_follow_the_format():
    assert sensor_id("CAMERA_01") == "CAMERA_01"
    assert sensor_id("camera front/left") == "camera_front_left"
    assert sensor_id(".hidden") == "_.hidden" and sensor_id("-x") == "_-x" and sensor_id("") == "_"
    assert len(sensor_id("a" * 300)) == 128
    for name in ("a b", ".", "-", "ü", "lidar:top"):
        assert ID_PATTERN.match(sensor_id(name)), name


def test_labels_map_known_classes_and_keep_others_in_snake_case():
    labels = {"bus/rv/caravan": "bus", "heavy_truck": "truck", "person": "pedestrian"}
    assert label(" Bus/RV/Caravan ", labels) == "bus"  # by its text
    assert label("Heavy Truck", labels) == "truck"  # by its snake_case form
    assert label("Person", labels) == "pedestrian"
    assert label("Traffic Cone", labels) == "traffic_cone"
    assert label("???", labels) == "unknown"
