# Quick start: `make demo` (set up + run the main job on the bundled sample),
#              `make test` (set up + run the whole test suite).
# Both create ./.venv on first use. Variables: PYTHON (interpreter for the venv),
# TORCH (the torch to install when the venv has none, e.g. a CUDA build),
# DEMO_FLAGS (build options of the demo: by default a quick build that fits a CPU in a few
# minutes: half-size images and at most 60,000 Gaussians, where the sample's lidar alone gives
# about 200,000; `make demo DEMO_FLAGS=` runs the full fast preset, best on a GPU).

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
SAMPLE ?= samples/tiny
DEMO_FLAGS ?= --steps 100 --downscale 2 --set max_points=50000 --set max_gaussians=60000

.PHONY: demo test setup system-deps sample clean

demo: setup
	$(PY) -m nurec_usd inspect $(SAMPLE)
	$(PY) -m nurec_usd build $(SAMPLE) -o runs/tiny --overwrite $(DEMO_FLAGS)
	$(PY) -m nurec_usd render runs/tiny --sensor front --frame 4 -o runs/tiny/replay_front.png --overwrite

test: setup
	$(PY) -m pytest

setup: system-deps $(VENV)/.installed

# open3d's wheel links libusb-1.0, which minimal Debian/Ubuntu images lack.
system-deps:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing libusb-1.0-0 (needed by open3d)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libusb-1.0-0) >/dev/null; \
	  else \
	    echo "note: libusb-1.0 is missing; open3d (point-cloud files) needs it: install libusb-1.0-0"; \
	  fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[test]"
	touch $@

# Regenerate the bundled sample capture (the synthetic `tiny` preset, seed 0, on the CPU)
# and samples/contact_sheet.png.
sample: setup
	$(PY) samples/make_sample.py $(SAMPLE)

clean:
	rm -rf $(VENV) .pytest_cache runs
